"""After ``fork()``: a child forgets what it inherited, never uses or closes it, and opens its own.

A forked child inherits its parent's connections, pools, loop threads and their finalisers as copies.
Using them would interleave two processes' bytes on one socket; closing them would end the parent's
session (a PostgreSQL Terminate on the shared socket); and a loop thread does not exist in the child
at all, so a finaliser waiting for it would stall the child's exit. Every holder of such a resource
registers here how to *forget* it (drop the references, detach the finalisers); a child runs them all
at once, and each holder opens fresh resources on its next use. ``generation()`` changes in each
child, for holders that check cheaply whether what they cached is still theirs.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import weakref
from collections.abc import Callable, Mapping
from typing import Any

_generation = 0
_HOLDERS: weakref.WeakKeyDictionary[Any, Callable[[Any], None]] = weakref.WeakKeyDictionary()


def generation() -> int:
    """A number that changes in every forked child: what was cached under another one is inherited."""
    return _generation


def forget_in_child(holder: object, forget: Callable[[Any], None]) -> None:
    """Call ``forget(holder)`` in a forked child, if ``holder`` still lives then. ``forget`` must only
    drop references and detach finalisers: no I/O, no lock the parent may have held."""
    _HOLDERS[holder] = forget


def abandon_loop(loop: asyncio.AbstractEventLoop) -> None:
    """In a forked child, make an inherited event loop inert, never closing it.

    Its selector (an epoll instance) is a kernel object shared with the parent: a transport closed
    here, even by the collector, would unregister its socket from the *parent's* loop, which would
    then never hear that socket again. The loop gets a selector that does nothing, and its tasks,
    which will never run here, are not reported as destroyed pending at exit."""
    for task in asyncio.all_tasks(loop):
        task._log_destroy_pending = False  # type: ignore[attr-defined]
    if hasattr(loop, "_selector"):
        loop._selector = _InertSelector()


class _InertSelector(selectors.BaseSelector):
    """The selector of an abandoned loop: it watches nothing, and forgets without touching the kernel."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return selectors.SelectorKey(fileobj, -1, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return {}


def _in_child() -> None:
    global _generation
    _generation += 1
    for holder, forget in list(_HOLDERS.items()):
        forget(holder)


os.register_at_fork(after_in_child=_in_child)
