"""How the console writes ids and document paths into its links, and how its routes read them back.

Every id and path goes into a link one percent-encoded segment at a time, as the SDKs send them
(``client._core.segment``): a session, run, key or agent name, and each segment of a document path.
A segment of dots alone (``.``, ``..``: valid ids, and the folder of an end user named ``..``) needs
more in a browser than in an SDK: every WHATWG URL parser reads ``%2E`` as a dot too and removes the
step, so ``users/%2E%2E/notes`` would open the shared ``notes``. The console escapes those dots once
more (``%252E``), which no parser treats as a step; the server decodes the path once, as always, and
``read_path`` turns a segment of ``%2E`` alone back into its dots. No id or path segment can hold
``%`` itself (the key charset and memory's path rules leave it out), so the reading is exact.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

DOTS = re.compile(r"(?:%2E)+", re.IGNORECASE)


def segment(text: Any) -> str:
    """One path segment of a link: percent-encoded, and a segment of dots alone as ``%252E`` each."""
    text = str(text)
    if text and set(text) == {"."}:
        return "%252E" * len(text)
    return quote(text, safe="")


def path(text: Any) -> str:
    """A document path in a link: each of its segments through ``segment``, ``/`` kept between them."""
    return "/".join(segment(part) for part in str(text).split("/"))


def read_path(text: str) -> str:
    """A path parameter as the route receives it (decoded once), with each segment of ``%2E`` alone
    turned back into its dots."""
    return "/".join("." * (len(part) // 3) if DOTS.fullmatch(part) else part for part in text.split("/"))
