"""What a session fork copies and cuts, apart from the backends that do it (``Database.fork_session``).

A fork is one atomic step on every backend: the new session's row (with its ``parent``), its agents
recorded (so its delete drops their state), every agent's session-scope namespace copied from the
source's, and the lists the caller named cut to their first items. The platform part answers with a
``Forked``; the namespaces and cuts it implies are named here once, so each backend's step only runs them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from .records import StoredSession, namespace

Cuts = Mapping[tuple[str, str], int]
"""``(agent, key)`` → how many items of that session-scope list the fork keeps (its first ones)."""


class Forked(NamedTuple):
    """The platform's part of a fork: the session as stored, whether this call made it, and the source's
    agents recorded in it (empty when a session of that id existed: nothing is copied then)."""

    session: StoredSession
    created: bool
    agents: list[str]


def copies(source: StoredSession, forked: Forked) -> Iterator[tuple[str, str]]:
    """``(source namespace, fork namespace)`` of every agent recorded in a new fork."""
    for agent in forked.agents:
        yield (
            namespace(source.env, "session", agent, source.id),
            namespace(source.env, "session", agent, forked.session.id),
        )


def cuts_of(fork: StoredSession, cuts: Cuts) -> Iterator[tuple[str, str, int]]:
    """``(fork namespace, key, items kept)`` of every list the caller named."""
    for (agent, key), keep in sorted(cuts.items()):
        yield namespace(fork.env, "session", agent, fork.id), key, keep
