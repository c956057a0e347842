"""``sql/event_rows.py``: emits packed a row each and read back from any ``after`` with any ``limit`` give
what a list of the events gives, rows of one event (the platform's, and all those written before step 10)
among them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keepstate.stores.records import NewEvent, StoredEvent
from keepstate.stores.sql.event_rows import Row, packed, unpacked

_EVENTS = st.tuples(st.sampled_from(["message", "run.status", "a,b", '"x"', ""]), st.binary(max_size=8))
_EMITS = st.lists(st.lists(_EVENTS, min_size=1, max_size=5), max_size=6)


def rows_of(emits: list[list[NewEvent]]) -> tuple[list[Row], list[StoredEvent]]:
    """The rows the emits write (one each, at time 10 * its number) and the events they hold."""
    rows: list[Row] = []
    events: list[StoredEvent] = []
    for at, emit in enumerate(emits):
        row = packed(emit)
        rows.append((len(events) + row.count, row.type, row.data, 10 * at, row.sizes, row.types))
        events += [StoredEvent(len(events) + n, kind, data, 10 * at) for n, (kind, data) in enumerate(emit, 1)]
    return rows, events


@given(_EMITS, st.integers(0, 30), st.integers(1, 30))
def test_a_read_of_packed_rows_is_a_read_of_the_events(emits: list[list[NewEvent]], after: int, limit: int) -> None:
    rows, events = rows_of(emits)
    past = [row for row in rows if row[0] > after]  # what the SQL selects, before its LIMIT
    assert unpacked(past[:limit], after, limit) == [event for event in events if event.seq > after][:limit]


def test_a_row_of_one_event_has_no_sizes_and_one_type_no_types() -> None:
    one = packed([("message", b'"a"')])
    assert (one.count, one.type, one.types, one.sizes, one.data) == (1, "message", None, None, b'"a"')
    two = packed([("message", b"1"), ("message", b"22")])
    assert (two.type, two.types, two.sizes, two.data) == ("message", None, "1,2", b"122")
    mixed = packed([("a", b"1"), ("b", b"2")])
    assert (mixed.type, mixed.types) == ("b", '["a","b"]')
