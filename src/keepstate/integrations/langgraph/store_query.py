"""What a LangGraph search or namespace listing selects, decided in Python over the items read.

keepstate has no index on the fields of a JSON value, so a ``SearchOp`` reads every item under its
namespace prefix (a key range scan) and this module filters, orders and pages them. The rules are
those of LangGraph's SQLite store, so one filter means the same on both:

- a filter key is a path of object keys joined by ``.`` (``"user.name"``), of ``A-Z a-z 0-9 _ . -``
  only (``ValueError`` otherwise, as SqliteStore refuses it);
- a plain filter value matches an equal JSON value (``None`` also matches a missing field; a bool
  equals only a bool); an object of operators applies each: ``$eq``, ``$ne`` (the field must be
  present), ``$gt``, ``$gte``, ``$lt``, ``$lte`` (numbers with numbers, strings with strings,
  anything else does not match); another ``$`` operator is a ``ValueError``;
- results are newest first (``updated_at``), then ``offset`` and ``limit``; ``score`` is None.

Namespace listings match prefix and suffix conditions label by label (``*`` matches any one
label), truncate to ``max_depth``, and are ordered by the namespace's dotted text, as SqliteStore's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import ge, gt, le, lt
from typing import Any, TypeVar

_FILTER_KEY = re.compile(r"[a-zA-Z0-9_.\-]+")
_MISSING = object()
T = TypeVar("T")
_ORDER: dict[str, Callable[[Any, Any], Any]] = {"$gt": gt, "$gte": ge, "$lt": lt, "$lte": le}
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse, before anything is read or written, a filter this module cannot apply."""
    for key, wanted in (filter or {}).items():
        if not isinstance(key, str) or _FILTER_KEY.fullmatch(key) is None:
            raise ValueError(
                f"Invalid filter key: {key!r}. Filter keys must contain only alphanumeric "
                "characters, underscores, dots, and hyphens."
            )
        for operator in _operators(wanted) or ():
            if operator not in OPERATORS:
                raise ValueError(f"Unsupported operator: {operator}")


def _operators(wanted: Any) -> Mapping[str, Any] | None:
    if isinstance(wanted, Mapping) and any(isinstance(name, str) and name.startswith("$") for name in wanted):
        return wanted
    return None


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes every condition of ``filter``."""
    for key, wanted in (filter or {}).items():
        found = _at(value, key)
        operators = _operators(wanted)
        if operators is None:
            if not (_equal(found, wanted) or (wanted is None and found is _MISSING)):
                return False
        elif not all(_holds(found, operator, operand) for operator, operand in operators.items()):
            return False
    return True


def _at(value: Any, path: str) -> Any:
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:  # stored values are decoded JSON: dicts
            return _MISSING
        value = value[name]
    return value


def _holds(found: Any, operator: str, operand: Any) -> bool:
    if found is _MISSING:
        return False
    if operator == "$eq":
        return _equal(found, operand)
    if operator == "$ne":
        return not _equal(found, operand)
    pair = _comparable(found, operand)
    if pair is None:
        return False
    return bool(_ORDER[operator](*pair))


def _comparable(found: Any, operand: Any) -> tuple[Any, Any] | None:
    if _is_number(found) and _is_number(operand):
        return float(found), float(operand)
    if isinstance(found, str) and isinstance(operand, str):
        return found, operand
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(found: Any, wanted: Any) -> bool:
    """JSON equality: a bool is not a number (1 == 1.0; NaN equals nothing), objects and arrays deeply."""
    if isinstance(wanted, str):  # the common case first
        return isinstance(found, str) and found == wanted
    if isinstance(found, bool) or isinstance(wanted, bool):
        return type(found) is type(wanted) and found == wanted
    if _is_number(found) and _is_number(wanted):
        return bool(found == wanted)
    if isinstance(found, Mapping) and isinstance(wanted, Mapping):
        return found.keys() == wanted.keys() and all(_equal(found[name], wanted[name]) for name in found)
    if isinstance(found, list | tuple) and isinstance(wanted, list | tuple):
        return len(found) == len(wanted) and all(map(_equal, found, wanted))
    return type(found) is type(wanted) and found == wanted


def page(hits: Iterable[T], updated_at: Callable[[T], str], offset: int, limit: int) -> list[T]:
    """Newest first (``updated_at``, then the order scanned), then ``offset``/``limit``."""
    return sorted(hits, key=updated_at, reverse=True)[offset : offset + limit]


def label_match(namespace: Sequence[str], path: Sequence[str], kind: str) -> bool:
    """Whether ``namespace`` starts (``prefix``) or ends (``suffix``) with ``path``, ``*`` any label."""
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if kind == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    return all(wanted in ("*", label) for label, wanted in pairs)


def plain_prefix(conditions: Iterable[Any]) -> tuple[str, ...]:
    """The longest prefix condition without a wildcard: what a listing can scan instead of everything."""
    best: tuple[str, ...] = ()
    for condition in conditions:
        if condition.match_type == "prefix" and "*" not in condition.path and len(condition.path) > len(best):
            best = tuple(condition.path)
    return best


def namespaces(
    found: Iterable[tuple[str, ...]], conditions: Iterable[Any], max_depth: int | None, offset: int, limit: int
) -> list[tuple[str, ...]]:
    """The listing of the namespaces ``found``, filtered, truncated, deduplicated, ordered, paged."""
    conditions = [condition for condition in conditions if condition.path]
    kept = {
        namespace if max_depth is None else namespace[:max_depth]
        for namespace in found
        if all(label_match(namespace, condition.path, condition.match_type) for condition in conditions)
    }
    return sorted(kept, key=".".join)[offset : offset + limit]
