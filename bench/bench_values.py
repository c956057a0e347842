"""Request bodies checked by ``keepstate.values.parse`` against ``orjson.loads`` of the same bytes.

One body of each shape an HTTP client can send, each under the 2 MiB body limit: what the checks
(NUL, integers past 64 bits, nesting, and finding a bad place's path) add to parsing. Both sides run
with the garbage collector as it is; ``parse`` pauses it while loading (see ``jsontext.paused``),
``orjson.loads`` does not, which is what a caller of either gets. A bad body (``"\\u0000"`` as its
last element) is refused with the path of that element; its time is shown against loading the good one.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import orjson

from keepstate import InvalidValue, values

from .timing import table

TARGET = 3.0
"""parse / orjson.loads, for every shape."""


def _row(element: bytes, count: int) -> bytes:
    return b"[" + b",".join([element] * count) + b"]"


def _shapes() -> dict[str, bytes]:
    """Each shape's value; the body is ``{"value": ...}`` as a PUT sends it."""
    rng = random.Random(7)
    chat = [
        {
            "role": ("user", "assistant")[i % 2],
            "content": f"turn {i}: " + "lorem ipsum dolor sit amet, " * 5 + '\n"quoted" [x]',
            "tokens": rng.randrange(1000),
        }
        for i in range(9_000)
    ]
    numbers = [rng.random() * 10 ** rng.randrange(-5, 12) for _ in range(70_000)] + list(range(60_000, 130_000))
    return {
        "690k empty objects": _row(b"{}", 690_000),
        "690k empty arrays": _row(b"[]", 690_000),
        "8,000 chains 126 deep": _row(b"[" * 126 + b"]" * 126, 8_000),
        "strings (300k short ones)": orjson.dumps([f"s{i % 1000}" for i in range(300_000)]),
        "a chat of 9,000 messages": orjson.dumps(chat),
        "one 1 MiB string": orjson.dumps("x" * (1 << 20)),
        "numbers (floats and ints)": orjson.dumps(numbers),
        "ids (19-digit numbers, 22-digit strings)": _row(
            b'{"id":"1234567890123456789012","n":1234567890123456789}', 35_000
        ),
    }


def _seconds(fn: Callable[[], object], rounds: int) -> float:
    """Median seconds of one call over ``rounds`` calls, each after a warm-up call."""
    fn()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _refuse(body: bytes) -> Callable[[], object]:
    def call() -> object:
        try:
            values.parse(body, values.MAX_DEPTH + 1)
        except InvalidValue as error:
            return error.path
        raise AssertionError("the bad body was accepted")

    return call


def _rounds(body: bytes) -> int:
    started = time.perf_counter()
    orjson.loads(body)
    return max(5, min(200, int(0.3 / max(time.perf_counter() - started, 1e-6))))


def _measure(name: str, value_text: bytes) -> tuple[object, ...]:
    body = b'{"value":' + value_text + b"}"
    bad = b'{"value":' + value_text[:-1] + b',"\\u0000"' + value_text[-1:] + b"}"
    if not value_text.startswith(b"["):  # one string: the NUL goes inside it
        bad = b'{"value":' + value_text[:-1] + b'\\u0000"}'
    assert len(bad) <= values.MAX_BODY_BYTES, name
    rounds = _rounds(body)
    loads, parse, refuse = [], [], []
    for _ in range(3):  # alternating, so that drift hits all three alike
        loads.append(_seconds(lambda: orjson.loads(body), rounds))
        parse.append(_seconds(lambda: values.parse(body, values.MAX_DEPTH + 1), rounds))
        refuse.append(_seconds(_refuse(bad), max(3, rounds // 4)))
    low, ours, bad_time = (statistics.median(times) for times in (loads, parse, refuse))
    return (
        name,
        f"{len(body) / 1048576:.2f}",
        f"{low * 1e3:.2f}",
        f"{ours * 1e3:.2f}",
        f"{ours / low:.2f}",
        f"{bad_time * 1e3:.1f}",
        f"{bad_time / low:.1f}",
    )


def run() -> str:
    rows = [_measure(name, text) for name, text in _shapes().items()]
    worst = max(float(str(row[4])) for row in rows)
    return "\n\n".join(
        [
            "## Request bodies: values.parse against orjson.loads",
            'Each body is `{"value": ...}` of the shape named, under the 2 MiB body limit, parsed as a PUT parses it '
            "(`values.parse(body, MAX_DEPTH + 1)`). Median of 3 alternating rounds, each the median of many calls; "
            "the machine is shared (2 cores), so single figures are noisy, ratios less so. `orjson.loads` runs with "
            "the garbage collector on, as a plain caller's would; `parse` pauses it while loading. The bad body is "
            'the same with `"\\u0000"` as the last element, refused with that element\'s path.',
            table(
                (
                    "shape",
                    "MiB",
                    "orjson.loads ms",
                    "parse ms",
                    "parse / loads",
                    "bad body refused, ms",
                    "refused / loads",
                ),
                rows,
            ),
            f"Target: parse ≤ {TARGET:.0f}× orjson.loads for every shape; worst here {worst:.2f}×"
            f" ({'met' if worst <= TARGET else 'not met'}).",
        ]
    )
