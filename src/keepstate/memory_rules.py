"""Memory's rules: whose documents a caller reaches, what its paths mean, and what it may write.

I/O-free, shared by the server (``platform/memory.py``), the embedded store and the SDK, which
import it without the server's modules.

An agent's memory (one per environment and agent: the *space* ``env/agent``) is a tree of
documents. ``users/{user}/`` is the folder of one end user, and who sees which folders is decided
here, once, for every entry point (the run-token routes, the callers' routes, the embedded store,
``keepstate.testing``), and applied identically to reads, writes, deletes, listings and search:

- a ``View`` of a user (a run with an end user, or an admin on ``/v0/users/{user}/memory/{agent}``)
  reaches everything outside ``users/`` and that user's own folder; ``users/{user}/…`` (the literal
  ``{user}``) means that folder, and so does the user's own name there;
- a ``View`` without a user (a run without an end user) reaches everything outside ``users/``;
  ``users/{user}/…`` is 409 ``no_user``;
- in both, a path naming another user's folder is 404, as an absent document is; listings and
  searches are limited to the reachable folders by the store, in the same statement (``PathFilter``);
- the agent's admin view (``/v0/agents/{agent}/memory``) reaches every folder.

Paths are 1–512 characters of ``A-Z a-z 0-9 . _ - /`` in non-empty segments, none ``.`` or ``..``;
a user's folder segment is a user name (``A-Z a-z 0-9 . _ : -``). The path is judged exactly as
given — an HTTP route hands over the percent-decoded path, so ``%2F`` is a ``/`` like any other —
and a first segment that spells ``users`` in another case (``Users/…``) is refused rather than taken
for a user folder or a shared one. The 512 characters count the path with the user's name in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from . import values
from .errors import InvalidRequest, InvalidValue, NotFound, NoUser, TooLarge
from .search import Query, check_query_text, parse_query
from .semantic import SEMANTIC, TEXT, check_filter, check_mode
from .stores.documents import DocumentHead, PathFilter

USERS = "users"
USER_PLACEHOLDER = "{user}"
MAX_PATH = 512
MAX_TEXT_BYTES = values.MAX_VALUE_BYTES
MAX_METADATA_BYTES = 16 * 1024
DEFAULT_HITS, MAX_HITS = 10, 50
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_CURSOR = re.compile(r"[A-Za-z0-9._:/-]{0,1024}")
EMPTY_METADATA = b"{}"


@dataclass(frozen=True, slots=True)
class View:
    """Whose memory, seen as whom: the space, the end user whose folder is reachable (None: none), and
    whether every folder is (the agent's admin view)."""

    space: str
    user: str | None = None
    every_folder: bool = False


def space_of(env: str, agent: str) -> str:
    """The space of one agent's memory; both parts in the key charset, so ``/`` cannot collide."""
    return f"{values.check_key(env, 'env')}/{values.check_key(agent, 'agent')}"


# ---------------------------------------------------------------- paths


def document_path(view: View, written: object) -> str:
    """The stored path that ``written`` names for ``view``. InvalidRequest when malformed, NoUser for
    ``{user}`` without a user, NotFound (as for an absent document) for another user's folder."""
    if not isinstance(written, str) or not written:
        raise InvalidRequest("path must be 1-512 of A-Z a-z 0-9 . _ - / in segments, like notes/today")
    segments = written.split("/")
    _check_first(segments[0], written)
    if segments[0] == USERS:
        if len(segments) < 3:
            raise InvalidRequest(
                f"a path under users/ names a document in a user's folder: users/{{user}}/NAME, got {written[:80]!r}"
            )
        segments[1] = _user_segment(view, segments[1], written)
        rest = segments[2:]
    else:
        rest = segments
    for segment in rest:
        _check_segment(segment, written)
    return _bounded("/".join(segments), written)


def listing_filter(view: View, prefix: object) -> PathFilter:
    """The ``PathFilter`` of a listing or search under ``prefix`` (a string prefix of paths, written as
    paths are: its last segment may be partial or empty), limited to the folders ``view`` reaches."""
    if not isinstance(prefix, str):
        raise InvalidRequest("prefix must be a string")
    resolved = _resolved_prefix(view, prefix) if prefix else ""
    if view.every_folder:
        return PathFilter(resolved)
    return PathFilter(resolved, f"{USERS}/", None if view.user is None else f"{USERS}/{view.user}/")


def _resolved_prefix(view: View, prefix: str) -> str:
    segments = prefix.split("/")
    if len(segments) > 1:
        _check_first(segments[0], prefix)
    rest = segments
    if segments[0] == USERS and len(segments) > 1:
        if len(segments) > 2 or segments[1] == USER_PLACEHOLDER:
            segments[1] = _user_segment(view, segments[1], prefix)
        elif segments[1] and not values.is_key(segments[1]):
            raise InvalidRequest(f"prefix {prefix[:80]!r}: a user's folder is named with A-Z a-z 0-9 . _ : -")
        rest = segments[2:]
    for index, segment in enumerate(rest):
        last = index == len(rest) - 1
        if not (last and segment == ""):  # a trailing slash: everything in that folder
            _check_segment(segment, prefix, partial=last)
    return _bounded("/".join(segments), prefix)


def check_after(after: object) -> str:
    """A listing's cursor: the ``next`` of the previous page (a stored path), or empty."""
    if not isinstance(after, str) or _CURSOR.fullmatch(after) is None:
        raise InvalidRequest("after must be the next of a previous page")
    return after


def _check_first(first: str, written: str) -> None:
    if first != USERS and first.lower() == USERS:
        raise InvalidRequest(f"path {written[:80]!r}: the users' folders are spelled users/, in lower case")


def _user_segment(view: View, segment: str, written: str) -> str:
    """The user a path's second segment names, when ``view`` may reach that user's folder."""
    if segment == USER_PLACEHOLDER:
        if view.user is None:
            raise NoUser("this run has no end user: users/{user}/ needs one")
        return view.user
    if not values.is_key(segment):
        raise InvalidRequest(f"path {written[:80]!r}: a user's folder is named with A-Z a-z 0-9 . _ : -")
    if view.every_folder or segment == view.user:
        return segment
    raise NotFound(f"no document at {written[:600]}")


def _check_segment(segment: str, written: str, partial: bool = False) -> None:
    if _SEGMENT.fullmatch(segment) is None or (not partial and segment in (".", "..")):
        raise InvalidRequest(
            f"path {written[:80]!r}: segments are non-empty runs of A-Z a-z 0-9 . _ -, "
            "never . or .., separated by single slashes"
        )


def _bounded(path: str, written: str) -> str:
    if len(path) > MAX_PATH:
        raise InvalidRequest(f"path {written[:80]!r}… is {len(path)} characters, over the limit of {MAX_PATH}")
    return path


# ---------------------------------------------------------------- values


def check_text(text: object) -> str:
    """A document's text: a string of at most 1 MiB of UTF-8, without U+0000 or lone surrogates."""
    if not isinstance(text, str):
        raise InvalidRequest("text must be a string")
    try:
        values.encode(text)  # refuses U+0000 and lone surrogates
    except InvalidValue as error:
        raise InvalidValue(error.message, path="$.text") from None
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise TooLarge(f"text is {size} bytes of UTF-8, over the limit of {MAX_TEXT_BYTES}")
    return text


def check_metadata(metadata: object) -> bytes:
    """A document's metadata as canonical JSON: an object (None: ``{}``) of at most 16 KiB."""
    if metadata is None:
        return EMPTY_METADATA
    if not isinstance(metadata, dict):
        raise InvalidRequest("metadata must be a JSON object")
    try:
        data = values.encode(metadata)
    except InvalidValue as error:
        raise InvalidValue(error.message, path="$.metadata" + error.path[1:]) from None
    if len(data) > MAX_METADATA_BYTES:
        raise TooLarge(f"metadata is {len(data)} bytes, over the limit of {MAX_METADATA_BYTES}")
    return data


def check_hits(limit: object) -> int:
    """A search's ``limit``: 1 or more (default 10), larger ones clamped to 50."""
    if limit is None:
        return DEFAULT_HITS
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidRequest("limit must be an integer of at least 1")
    return min(limit, MAX_HITS)


@dataclass(frozen=True, slots=True)
class Search:
    """A checked search request: the query as typed and parsed (no terms: not searched by words), the
    filter (folders, metadata), how many hits, and the mode (``keepstate.semantic``)."""

    text: str
    query: Query
    where: PathFilter
    limit: int
    mode: str = TEXT


def checked_search(
    view: View,
    query: object,
    prefix: object,
    limit: object,
    mode: object = None,
    filter: object = None,
    has_embedder: bool = False,
) -> Search:
    """The search asked for: InvalidRequest for a malformed part, NoEmbedder for meaning without an embedder.
    A query searched by meaning alone may be any text (quotes are no syntax there)."""
    checked_mode = check_mode(mode, has_embedder)
    parsed = parse_query(query) if checked_mode != SEMANTIC else _meaning_query(query)
    assert isinstance(query, str)  # both checks refuse anything else
    where = listing_filter(view, "" if prefix is None else prefix)
    where = replace(where, metadata=check_filter(filter))
    return Search(query, parsed, where, check_hits(limit), checked_mode)


def _meaning_query(query: object) -> Query:
    """A query by meaning: any text (quotes are no syntax there) holding more than blanks."""
    if not check_query_text(query).strip():
        raise InvalidRequest("query has nothing to search for")
    return Query(())


def next_cursor(heads: list[DocumentHead], limit: int) -> str | None:
    return heads[-1].path if len(heads) == limit and heads else None
