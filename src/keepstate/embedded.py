"""``keepstate.open(url)``: state scopes and agents' memory straight on a store, no server, for one-process
apps and tests."""

from __future__ import annotations

from types import TracebackType

from . import values
from .memory import Memory, StoreMemoryOps
from .platform.memory import View, space_of
from .scope import Scope, StoreOps, scope_namespace
from .stores import open_database
from .stores.base import Database, SyncStateFacet


class Store:
    """An opened store. ``scope(kind, agent=..., id=...)`` gives a ``Scope``; close when done."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.url = database.url
        self.state: SyncStateFacet = database.sync_state()

    def scope(self, kind: str, agent: str, id: str | None = None, env: str = "default") -> Scope:
        """The ``run``/``session``/``user`` scope of ``id``, or the ``agent`` scope (no id), of one agent."""
        return Scope(StoreOps(self.state, scope_namespace(kind, agent, id, env)))

    def memory(self, agent: str, user: str | None = None, env: str = "default") -> Memory:
        """``agent``'s memory as a run of end user ``user`` sees it (its folder ``users/{user}/`` and
        everything outside ``users/``), or as a run without one. Needs SQLite, PostgreSQL or memory://."""
        view = View(space_of(env, agent), None if user is None else values.check_key(user, "user"))
        return Memory(StoreMemoryOps(self.database.sync_documents, view))

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def open(url: str) -> Store:
    """Open the store at ``url`` (``memory://``, ``sqlite:///file.db``, ``postgresql://…``, ``redis://…``)."""
    database = open_database(url)
    try:
        return Store(database)
    except BaseException:
        database.close()
        raise
