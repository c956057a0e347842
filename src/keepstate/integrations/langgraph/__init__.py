"""keepstate inside LangGraph: ``KeepstateSaver``, a checkpointer, and ``KeepstateStore`` /
``AsyncKeepstateStore``, stores, each on any keepstate store.

Needs the ``langgraph`` extra: ``pip install 'keepstate[langgraph]'``.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as error:  # pragma: no cover - the dev install has the extra
    raise ImportError("keepstate.integrations.langgraph needs LangGraph: pip install 'keepstate[langgraph]'") from error

from .saver import KeepstateSaver
from .store import AsyncKeepstateStore, KeepstateStore

__all__ = ["AsyncKeepstateStore", "KeepstateSaver", "KeepstateStore"]
