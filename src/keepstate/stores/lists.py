"""Lists as backends keep them: encoded items joined on read, never re-encoded on append.

A list is stored as its items' canonical JSON bytes; the list's JSON is ``[`` + items joined by
``,`` + ``]``, so its size is known without building it and an append never touches old items.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from ..errors import TooLarge
from ..values import MAX_VALUE_BYTES, list_size


def appended_size(size: int, length: int, item_sizes: Sequence[int]) -> int:
    """The JSON size of a list of ``length`` items and ``size`` bytes after appending items."""
    if length == 0:
        return list_size(item_sizes, len(item_sizes))
    return size + sum(item_sizes) + len(item_sizes)


def check_append(size: int) -> None:
    """Refuse an append whose result would pass 1 MiB; the caller then adds nothing."""
    if size > MAX_VALUE_BYTES:
        raise TooLarge(f"the list would be {size} bytes, over the limit of {MAX_VALUE_BYTES}")


def join_items(items: Sequence[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def split_list(data: bytes) -> list[bytes]:
    """The items of a stored JSON list, each as canonical bytes (for a list's first append)."""
    return [orjson.dumps(item) for item in orjson.loads(data)]
