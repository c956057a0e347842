"""Embedders for the tests: deterministic functions of the text, no model, nothing downloaded.

``concepts`` puts each word on the axis of its *concept* (a small table of synonyms: "flight",
"trip" and "journey" are all travel; "cancelled" and "called off" are cancelling), so texts that
share no word but share a meaning are near, as a real model would have them; other words get an
axis of their own by hash, weighing less. ``flaky`` is ``concepts`` that fails while the file named
by ``KEEPSTATE_TEST_EMBEDDER_DOWN`` exists, for the tests of failures that must lose nothing, and
waits while the file named by ``KEEPSTATE_TEST_EMBEDDER_GATE`` exists, for the tests of a slow one.
"""

from __future__ import annotations

import math
import os
import re
import time
import zlib

DIMS = 64
CONCEPTS = {
    "travel": "flight flights trip trips journey travel plane airline",
    "cancel": "cancelled canceled cancel cancelling called scrapped",
    "storm": "storm weather rain thunder hurricane",
    "food": "food meal meals vegetarian dinner lunch eat eats cuisine",
    "money": "refund refunds money paid payment revenue invoice price",
    "music": "music jazz song songs concert",
    "pet": "cat cats dog dogs pet pets kitten",
}
_CONCEPT_OF = {word: concept for concept, words in CONCEPTS.items() for word in words.split()}
_WORD = re.compile(r"[a-z0-9]+")


def _axis(name: str) -> int:
    return zlib.crc32(name.encode()) % DIMS


def vector(text: str) -> list[float]:
    values = [0.0] * DIMS
    for word in _WORD.findall(text.lower()):
        concept = _CONCEPT_OF.get(word)
        if concept is not None:
            values[_axis("concept:" + concept)] += 1.0
        else:
            values[_axis(word)] += 0.2
    if not any(values):
        values[0] = 1.0
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def concepts(texts: list[str]) -> list[list[float]]:
    return [vector(text) for text in texts]


def flaky(texts: list[str]) -> list[list[float]]:
    down = os.environ.get("KEEPSTATE_TEST_EMBEDDER_DOWN")
    if down and os.path.exists(down):
        raise ConnectionError("the embedding service is down")
    _wait_at_the_gate()
    return concepts(texts)


def _wait_at_the_gate() -> None:
    """While the file named by ``KEEPSTATE_TEST_EMBEDDER_GATE`` exists, say so (``<gate>.entered``) and
    wait for it to go (at most a minute): a slow embedder, made slow by the test, not by chance."""
    gate = os.environ.get("KEEPSTATE_TEST_EMBEDDER_GATE")
    if not gate or not os.path.exists(gate):
        return
    with open(gate + ".entered", "w"):
        pass
    deadline = time.monotonic() + 60
    while os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)


def wide(texts: list[str]) -> list[list[float]]:
    """``concepts`` in twice the dimensions: another embedder, as after a change of model."""
    return [v + v for v in concepts(texts)]
