"""Facts about valid JSON text, found at C speed whatever its shape: the checks behind ``values``.

orjson parses fast but lets three things through that keepstate refuses: ``\\u0000`` in strings,
integers past 64 bits (read as floats) and nesting deeper than ``MAX_DEPTH`` (it stops at 1024). These
functions answer for text orjson has already read (so it is valid JSON) *exactly*, using only
operations on the whole text (``translate``, ``replace``, ``find``, ``count``, ``split``, a literal-led
regular expression, orjson itself): no Python code runs per element, so a 2 MiB body costs a few
passes over its bytes. A false alarm would send a good body to the slow exact parse, so none is
allowed; the tests compare each answer with a plain reading of the parsed value.
"""

from __future__ import annotations

import gc
import heapq
import re
from collections.abc import Callable, Iterator
from typing import Any

import orjson

PAUSE_FROM_BYTES = 64 * 1024
ORJSON_DEPTH = 1024
"""orjson refuses to load nesting deeper than this."""


def paused(load: Callable[..., Any], text: bytes | str, **options: Any) -> Any:
    """``load(text)`` with the cyclic garbage collector paused when the text is big.

    A parser makes every list and dict it builds tracked by the collector, and every 700 new ones
    start a collection, now and then of all objects: 690k empty lists load in 182 ms with the
    collector on and 24 ms with it paused. Parsed JSON holds no reference cycles, so pausing
    leaves no garbage behind, but a pause alone only moves the cost: the next collection finds a
    million young objects, and where a dict holds them (``{"value": [...]}``: a dict is tracked
    only when its first container goes in, so after everything in it) it walks them all twice,
    0.4-0.8 s for 8,000 chains 126 deep. So the new objects join the oldest generation at once
    (``freeze`` then ``unfreeze``: two list splices), which only a full collection walks; they are
    freed by reference counting when the request is done. This is skipped when the application
    froze objects itself (``unfreeze`` would thaw them) or turned the collector off."""
    if len(text) < PAUSE_FROM_BYTES or not gc.isenabled() or gc.get_freeze_count():
        return load(text, **options)
    gc.disable()
    try:
        value = load(text, **options)
        gc.freeze()
        gc.unfreeze()
        return value
    finally:
        gc.enable()


class DeeperThan(Exception):
    """Valid JSON text nested deeper than the limit. Its value may not be: a repeated key can replace
    the deep member (``{"a": [[...]], "a": 0}``), and the value is what counts."""


def load_checked(text: bytes, max_depth: int) -> tuple[Any, bool]:
    """``orjson.loads(text)`` (``paused``) that also refuses nesting deeper than ``max_depth``
    (``DeeperThan``; bad text raises ``orjson.JSONDecodeError``), and whether the text may hold ``\\u0000`` or an
    integer past 64 bits (a likely yes: the caller reads it exactly). One scan serves both.

    The depth is bounded first by the containers opened (strings' brackets too), then, for a text with
    more, by its skeleton (``skeleton_deeper``: ~15 µs for 10 KiB), which is exact for valid JSON: a
    text of many shallow objects (an emit's 100 events ``{type, data: {...}}``) is loaded plainly
    instead of wrapped in hundreds of lists (~90 µs, and that many more objects for the collector).
    Text that is not JSON is refused by either load, so an answer of the skeleton's for it changes
    nothing."""
    scan = text.translate(_SCAN, _SCAN_DROPS)
    if scan.count(b"[") <= max_depth or not skeleton_deeper(_outside_strings(scan, None, _BUT_BRACKETS), max_depth):
        return paused(orjson.loads, text), _nul_or_big_int(text, scan)
    return _loads_wrapped(text, max_depth), _nul_or_big_int(text, scan)


def _loads_wrapped(text: bytes, max_depth: int) -> Any:
    """The depth check in orjson's own pass: the text goes in ``ORJSON_DEPTH - max_depth`` lists, so
    orjson's limit falls at exactly ``max_depth`` (it counts arrays and objects alike). Each wrapping
    list must hold one item: a text of several values (``1,2``, ``1],[2``) or none fills some other
    way and is refused. Wrapping costs orjson ~50 µs, hence only past the bound."""
    wrap = ORJSON_DEPTH - max_depth
    try:
        value = paused(orjson.loads, b"".join((_OPEN * wrap, text, _CLOSE * wrap)))
    except orjson.JSONDecodeError:
        paused(orjson.loads, text)  # bad text raises as it is
        raise DeeperThan(max_depth) from None
    for _ in range(wrap):
        if len(value) != 1:
            raise orjson.JSONDecodeError("not one JSON value", "", 0)
        value = value[0]
    return value


_OPEN, _CLOSE = b"[", b"]"


def _all_but(kept: bytes) -> bytes:
    return bytes(sorted(set(range(256)) - set(kept)))


def _mapping(pairs: dict[bytes, bytes], default: int | None = None) -> bytes:
    table = bytearray(range(256)) if default is None else bytearray([default] * 256)
    for sources, target in pairs.items():
        for source in sources:
            table[source] = target[0]
    return bytes(table)


_DIGITS = b"0123456789"
_NUL_ESCAPE = b"\\u0000"
_LONG_RUN = b"9" * 19
_SCAN = _mapping({_DIGITS: b"9", b"{": b"[", b"}": b"]"})
_SCAN_DROPS = _all_but(_DIGITS + b'[]{}",:.+-\\/bfnrtu')
"""The scan keeps brackets, quotes, digits (as 9), what stops two numbers from running together,
and every character that can follow a backslash, so that escapes stay whole in what is left."""


def holds_bad(text: bytes, max_depth: int) -> bool:
    """Whether valid JSON ``text`` holds ``\\u0000``, an integer past signed 64 bits or nesting
    deeper than ``max_depth``."""
    scan = text.translate(_SCAN, _SCAN_DROPS)
    return _nul_or_big_int(text, scan) or (
        scan.count(b"[") > max_depth and skeleton_deeper(_outside_strings(scan, None, _BUT_BRACKETS), max_depth)
    )


def _nul_or_big_int(text: bytes, scan: bytes) -> bool:
    """Whether valid JSON ``text`` holds ``\\u0000`` or an integer past signed 64 bits, asked of its
    ``scan`` first and, for a likely yes only, of the whole text.

    One ``translate`` (the scan) keeps a fraction of ordinary text (none of a long string of
    letters). There, every run of 19 digits after a ``.`` (orjson writes ``0.0000863206886685323``)
    is a fraction, so when the runs of 19 are as many as those led by a dot no integer can be long
    enough (a run of 38 digits would count twice on the left: a false alarm, not a miss)."""
    return (b"\\" in scan and b"\\u9999" in scan and has_nul(text)) or (
        _LONG_RUN in scan and scan.count(_LONG_RUN) != scan.count(b"." + _LONG_RUN) and has_big_int(text)
    )


def has_nul(text: bytes) -> bool:
    """An escaped U+0000 (raw control characters are not JSON); ``\\\\u0000`` is a backslash."""
    return _NUL_ESCAPE in text and _NUL_ESCAPE in text.replace(b"\\\\", b"")


_ALL_DIGITS_TO_9 = bytes.maketrans(_DIGITS, b"9" * 10)


def has_long_digits(data: bytes) -> bool:
    """19 digits in a row, found by mapping digits to 9 and searching for the run, which is ~15x
    faster than the regular expression ``\\d{19,}`` over the same bytes."""
    return _LONG_RUN in data.translate(_ALL_DIGITS_TO_9)


_BUT_NUMBERS = _all_but(_DIGITS + b'.eE+-,:[]{}"')


def has_big_int(text: bytes) -> bool:
    """An integer literal outside signed 64 bits; digits inside strings (ids) are not numbers."""
    if next(_long_digit_runs(text), None) is None:  # counting the digits in strings too
        return False
    return first_big_int(_outside_strings(text, None, _BUT_NUMBERS)) >= 0


_LONG_INT = re.compile(rb"(?<![\d.eE+\-])(-?)(\d{19,})(?![\d.eE])")
"""An integer literal of 19 digits or more, outside strings (not a fraction or an exponent)."""


def first_big_int(code: bytes) -> int:
    """Where the first integer literal past 64 bits starts in JSON text without strings, or -1."""
    for start in _long_digit_runs(code):
        if code[start - 1 : start] == b"-":
            start -= 1
        found = _LONG_INT.match(code, start)
        if found is not None and _out_of_range(found):
            return start
    return -1


def _out_of_range(found: re.Match[bytes]) -> bool:
    """JSON has no leading zeros: 20 digits are past 2**64, and 19 compare as text."""
    sign, digits = found.groups()
    return len(digits) > 19 or digits > (b"9223372036854775808" if sign else b"9223372036854775807")


_NOT_AFTER = {b".eE+": b".", b"-": b"-", b'"': b'"'}
_NINES = _mapping({_DIGITS: b"9", **_NOT_AFTER}, default=ord(" "))
_NINE_MARKS = _mapping({b"012345678": b"0", b"9": b"9", **_NOT_AFTER}, default=ord(" "))
_TWENTY_DIGITS = (b" " + b"9" * 20, b"-" + b"9" * 20)
_NINETEEN_FROM_9 = (re.compile(rb" 9[09]{18}"), re.compile(rb"-9[09]{18}"))
"""Led by literals, so the regular expression engine skips from one `` 9`` or ``-9`` to the next at
C speed (a pattern led by a character class tries every separator: ~30 ms for 2 MiB)."""


def _long_digit_runs(text: bytes) -> Iterator[int]:
    """The starts of the digit runs that may be integers past 64 bits, in order: 20 digits or more,
    or 19 from a 9 (every integer of 19 digits from 1 to 8 fits), each after a separator or a
    minus: a run after ``.``, ``e`` or ``+`` is a fraction or an exponent (often 20 digits long in
    orjson's ``0.0000863206886685323``), and one right after ``"`` is in a string (an id)."""
    nines, marks = b" " + text.translate(_NINES), b" " + text.translate(_NINE_MARKS)  # index i: text's i - 1
    twenty = [_found(nines, run) for run in _TWENTY_DIGITS]
    from_nine = [(found.start() for found in pattern.finditer(marks)) for pattern in _NINETEEN_FROM_9]
    return heapq.merge(*twenty, *from_nine)


def _found(text: bytes, needle: bytes) -> Iterator[int]:
    start = text.find(needle)
    while start >= 0:
        yield start
        start = text.find(needle, start + len(needle))


def unescaped(text: bytes) -> bytes:
    """JSON text without its escaped backslashes and quotes: every ``"`` left opens or closes a string."""
    if b"\\" not in text:
        return text
    return text.replace(b"\\\\", b"").replace(b'\\"', b"")


def _outside_strings(text: bytes, table: bytes | None, drops: bytes) -> bytes:
    """``text.translate(table, drops)`` of JSON text with its string literals left out (``drops``
    keeps ``"``; escapes must be whole in ``text``). Removing two adjacent quotes either drops an
    empty string or joins two strings with nothing kept between them, so most strings go in one
    ``replace``; the few left (holding kept characters) are cut out by splitting at the quotes."""
    kept = unescaped(text).translate(table, drops)
    if b'"' in kept:
        kept = kept.replace(b'""', b"")
    if b'"' in kept:
        kept = b"".join(kept.split(b'"')[::2])
    return kept


_BRACKETS = bytes.maketrans(b"{}", b"[]")
_BUT_BRACKETS = _all_but(b'[]{}"')


def deeper_than(text: bytes, limit: int) -> bool:
    """Whether valid JSON ``text`` nests deeper than ``limit``."""
    if text.count(b"[") + text.count(b"{") <= limit:  # every container opened: a bound
        return False
    return skeleton_deeper(_outside_strings(text, _BRACKETS, _BUT_BRACKETS), limit)


_MERGES = tuple(b"]" * size + b"[" * size for size in (128, 64, 32, 16, 8, 4, 2, 1))
_ROUNDS = 4


def skeleton_deeper(skeleton: bytes, limit: int) -> bool:
    """Whether balanced ``[`` and ``]`` nest deeper than ``limit``, by whole-text replaces.

    Removing ``][`` merges two siblings into one node holding the children of both: every depth
    stays. Brackets with no ``][`` left are one chain, as deep as half their length. Removing every
    ``[]`` takes all leaves away: the deepest nesting drops by exactly one. Wide values vanish in a
    round; rows of deep chains need the wider merges (``]]][[[``); what is left after a few rounds
    goes to orjson, wrapped so that it refuses exactly what is too deep."""
    for _ in range(_ROUNDS):
        skeleton = skeleton.replace(b"][", b"")
        if b"][" not in skeleton:
            return len(skeleton) // 2 > limit
        for merge in _MERGES:
            skeleton = skeleton.replace(merge, b"")
        skeleton, limit = skeleton.replace(b"[]", b""), limit - 1
        if len(skeleton) <= 2 * limit:
            return False
        if limit < 0:
            return True
    wrap = ORJSON_DEPTH - limit
    try:
        paused(orjson.loads, b"[" * wrap + skeleton.replace(b"][", b"],[") + b"]" * wrap)
    except orjson.JSONDecodeError:
        return True
    return False
