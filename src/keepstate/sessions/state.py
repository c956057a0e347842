"""``SessionState``: what a conversational runtime keeps per session (schema version 2).

A plain dataclass whose helpers keep its rules (bounded history with a lifetime message count,
facts that read as absent once expired, host context stripped of credential-like fields), and a
lossless JSON form. Validation goes through ``keepstate.values.encode`` so a state that would not
survive a round trip (NaN, huge integers, non-JSON types) is refused when it is serialised, with
the path of the bad place, rather than corrupted in the store.

Times are milliseconds since the epoch (``expires_at``, fact expiry), as in the seed's interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from ..clock import now_ms
from ..errors import InvalidValue
from ..values import decode, encode

SCHEMA_VERSION = 2
DEFAULT_HISTORY_LIMIT = 50
PHASES = ("idle", "executing")
ROLES = ("user", "assistant")

# Normalised (lower case, letters and digits only) fragments of keys that name a credential, wherever
# they stand in the name ("x-auth-token", "DB_PASSWORD", "jwtSecret") ...
_CREDENTIAL_MARKERS = (
    "authorization",
    "authentication",
    "cookie",
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "accesskey",
    "credential",
    "privatekey",
    "signature",
    "bearer",
    "jwt",
)
# ... and short credential words that count only as a whole word of the name ("auth", "x-auth",
# "authHeader", "db_pwd"), so that "author" or "compass" are kept.
_CREDENTIAL_WORDS = frozenset({"auth", "oauth", "pwd", "pass", "pw", "otp", "sso", "csrf", "xsrf", "sid"})
_NOT_ALNUM = re.compile(r"[^a-z0-9]")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def is_credential_key(key: str) -> bool:
    """True when ``key`` names a credential: it holds a credential marker (case and punctuation
    ignored) or one of its words (split at punctuation and case changes) is a credential word."""
    normal = _NOT_ALNUM.sub("", key.lower())
    if any(marker in normal for marker in _CREDENTIAL_MARKERS):
        return True
    return any(word.lower() in _CREDENTIAL_WORDS for word in _WORD.findall(key))


def sanitize(value: Any) -> Any:
    """A copy of ``value`` with every credential-like object key removed, at any depth."""
    if isinstance(value, dict):
        return {k: sanitize(v) for k, v in value.items() if not (isinstance(k, str) and is_credential_key(k))}
    if isinstance(value, list | tuple):
        return [sanitize(item) for item in value]
    return value


@dataclass
class SessionState:
    """One session's working state. Mutate through the helpers to keep the rules."""

    state: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    stack: list[Any] = field(default_factory=list)
    pending_selection: Any = None
    pending_confirmation: Any = None
    host_context: dict[str, Any] = field(default_factory=dict)
    references: dict[str, Any] = field(default_factory=dict)
    config_hash: str | None = None
    expires_at: int | None = None
    message_count: int = 0
    phase: str = "idle"
    effect: dict[str, Any] | None = None
    last_effect: dict[str, Any] | None = None
    history_limit: int = DEFAULT_HISTORY_LIMIT
    version: int = SCHEMA_VERSION

    def add_message(self, role: str, content: Any) -> None:
        """Append a user/assistant message, dropping the oldest past ``history_limit``."""
        if role not in ROLES:
            raise InvalidValue(f"role must be one of {ROLES}, got {role!r}", path="$.role")
        self.history.append({"role": role, "content": content})
        self.message_count += 1
        overflow = len(self.history) - max(self.history_limit, 0)
        if overflow > 0:
            del self.history[:overflow]

    def set_fact(self, name: str, value: Any, source: str, ttl_seconds: float | None = None) -> None:
        """Record a sourced fact; with ``ttl_seconds`` it reads as absent once that time has passed."""
        expires = None if ttl_seconds is None else now_ms() + int(ttl_seconds * 1000)
        self.facts[name] = {"value": value, "source": source, "expires_at": expires}

    def get_fact(self, name: str) -> Any:
        """The fact's value, or None when it is absent or expired."""
        fact = self.facts.get(name)
        if fact is None or self.fact_expired(name):
            return None
        return fact["value"]

    def fact_expired(self, name: str) -> bool:
        expires = self.facts.get(name, {}).get("expires_at")
        return expires is not None and expires <= now_ms()

    def set_host_context(self, context: dict[str, Any]) -> None:
        """Store a sanitised copy of trusted host metadata (credential-like keys dropped at any depth)."""
        self.host_context = sanitize(dict(context))

    def expired(self, at_ms: int | None = None) -> bool:
        """True when ``expires_at`` is set and has passed."""
        return self.expires_at is not None and self.expires_at <= (now_ms() if at_ms is None else at_ms)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to_json(self) -> str:
        """The canonical JSON text; raises InvalidValue (with a path) for a non-JSON field."""
        return encode(self.to_dict()).decode("utf-8")

    def to_bytes(self) -> bytes:
        return encode(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionState:
        """Rebuild a state; unknown keys are ignored, a newer schema version is refused."""
        version = data.get("version", SCHEMA_VERSION)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise InvalidValue(f"session state schema version {version!r} is newer than {SCHEMA_VERSION}")
        known = {f.name for f in fields(cls)}
        state = cls(**{k: v for k, v in data.items() if k in known})
        state.version = SCHEMA_VERSION
        if state.phase not in PHASES:
            raise InvalidValue(f"phase must be one of {PHASES}, got {state.phase!r}", path="$.phase")
        return state

    @classmethod
    def from_json(cls, text: str | bytes) -> SessionState:
        data = decode(text.encode("utf-8") if isinstance(text, str) else text)
        if not isinstance(data, dict):
            raise InvalidValue("a session state is a JSON object")
        return cls.from_dict(data)
