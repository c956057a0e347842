"""How every backend answers a batch: each op in order, version conflicts gathered, the first other
error raised with its op's ``index``; the caller's atomic step (a transaction, a lock with saved
copies) undoes everything when this raises. One collector for every backend's loop, sync or async::

    gathered = Gathered()
    for index, op in enumerate(ops):
        with gathered.op(index, op):
            gathered.results.append(apply(op))      # or: await apply(op)
    return gathered.answers()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import KeepstateError, VersionConflict
from .records import BatchOp


class Gathered:
    """The answers of a batch's ops so far, and every version conflict among them."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self.conflicts: list[dict[str, Any]] = []

    @contextmanager
    def op(self, index: int, op: BatchOp) -> Iterator[None]:
        """Around one op: its conflict is noted (the op wrote nothing), any other error gets its index."""
        try:
            yield
        except VersionConflict as error:
            current = error.current_version
            self.conflicts.append({"index": index, "ns": op.ns, "key": op.key, "current_version": current})
        except KeepstateError as error:
            raise type(error)(error.message, **{**error.details, "index": index}) from None

    def answers(self) -> list[Any]:
        """One answer per op, or the conflict listing every failed check (the first one's version on top)."""
        if self.conflicts:
            raise VersionConflict(current_version=self.conflicts[0]["current_version"], conflicts=self.conflicts)
        return self.results
