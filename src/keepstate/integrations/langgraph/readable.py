"""The thread's messages as the console shows a conversation: ``{role, content, id}`` items.

The checkpoints keep LangChain's messages through the saver's serde (exact, not readable); this is a
copy of the root namespace's messages, appended in the same batch as the checkpoint that added them.
When a list of messages is replaced rather than extended (messages removed or edited), the copy is
replaced by its last ``REPLACE_LAST`` messages; a content longer than ``MAX_CONTENT`` characters is
cut there. It is a view: nothing is read back from it, and a checkpoint is never refused for it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from keepstate import values
from keepstate.errors import InvalidValue

from .rebase import Stored

REPLACE_LAST = 200
KEEP_ON_FULL = 200
"""When the copy reaches keepstate's 1 MiB for one list, it keeps this many of its newest items."""
MAX_CONTENT = 2_000
ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


@dataclass(frozen=True)
class Change:
    items: list[dict[str, Any]]
    replace: bool

    def apply(self, batch: Any, key: str) -> None:
        if self.replace:
            batch.put(key, self.items)
        else:
            batch.append(key, self.items)


def update(stored: Iterable[Stored]) -> Change | None:
    """What the checkpoint's list channels of messages change in the readable copy (None: nothing)."""
    added: list[dict[str, Any]] = []
    for channel in stored:
        if channel.items is None or not channel.items or not all(map(_is_message, channel.items[-1:])):
            continue
        if channel.appended is None:
            return Change([_readable(message) for message in channel.items[-REPLACE_LAST:]], replace=True)
        added += [_readable(message) for message in channel.appended if _is_message(message)]
    return Change(added, replace=False) if added else None


def _is_message(item: Any) -> bool:
    return hasattr(item, "type") and hasattr(item, "content")


def _readable(message: Any) -> dict[str, Any]:
    return {
        "role": ROLES.get(message.type, str(message.type)),
        "content": _content(message.content),
        "id": getattr(message, "id", None),
    }


def _content(content: Any) -> Any:
    if isinstance(content, str):
        return content[:MAX_CONTENT]
    try:
        values.encode(content)
    except InvalidValue:
        return str(content)[:MAX_CONTENT]
    return content if len(str(content)) <= MAX_CONTENT else str(content)[:MAX_CONTENT]
