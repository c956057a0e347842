"""``KeepstateSession`` built from ``SQLiteSession``'s arguments, for openai-agents' own session tests.

Those tests build ``SQLiteSession(session_id, db_path=":memory:", *, session_settings=None)``
themselves; the shim (shims/openai_session_shim.py) rebinds that name to this class, which opens
keepstate's session on the same place: ``sqlite:///`` + ``db_path`` for a file, ``memory://`` (a
new in-process store, as ``:memory:`` is a new database) for the default.

A closed ``KeepstateSession`` refuses every call with ``RuntimeError("<its class> is closed")``;
this class's name ends in ``SQLiteSession`` so that the suite's check of the SDK's message
(``match="SQLiteSession is closed"``) is met by that same rule, not by a special case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from keepstate.integrations.openai_agents import KeepstateSession


class StandInSQLiteSession(KeepstateSession):
    def __init__(self, session_id: str, db_path: str | Path = ":memory:", *, session_settings: Any = None) -> None:
        url = "memory://" if str(db_path) == ":memory:" else f"sqlite:///{db_path}"
        super().__init__(session_id, url, session_settings=session_settings)
