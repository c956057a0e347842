"""Google ADK sessions on keepstate: ``KeepstateSessionService(url)``, a ``BaseSessionService``.

Needs the ``adk`` extra (``pip install 'keepstate[adk]'``); ``import keepstate`` never imports ADK.
"""

from __future__ import annotations

try:
    import google.adk.sessions  # noqa: F401
except ImportError as error:  # pragma: no cover - the dev install has the extra
    raise ImportError("keepstate.integrations.adk needs Google ADK: pip install 'keepstate[adk]'") from error

from .service import KeepstateSessionService

__all__ = ["KeepstateSessionService"]
