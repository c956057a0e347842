"""Deleting, copying and pruning threads: the saver's maintenance, thread by thread.

``delete_for_runs`` finds a run's checkpoints through the agent-scope run index (one entry per run,
thread and namespace); ``prune(keep_latest)`` rewrites the kept checkpoint's list deltas as snapshots
before deleting what is older, so the kept one never needs a deleted blob. Each may run while
another process puts checkpoints to the same thread: none of them undoes or deletes such a put
(heads are moved by compare-and-set, and what is deleted or copied is listed before the heads it
keeps are read).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from keepstate import Scope
from keepstate.errors import VersionConflict
from keepstate.protocol import MAX_BATCH_OPS, MAX_LIST_READ
from keepstate.scope import UPDATE_TRIES, backoff_seconds

from . import blobs, keys, turns

if TYPE_CHECKING:
    from .saver import KeepstateSaver


def delete_thread(saver: KeepstateSaver, thread_id: str) -> None:
    thread_key = keys.thread_key(str(thread_id))
    scope = saver._thread(thread_key)
    _delete_keys(scope, [key for key, _ in scope.keys()])
    saver._index().delete(keys.thread_entry(thread_key))
    saver._forget(thread_key)


def copy_thread(saver: KeepstateSaver, source_thread_id: str, target_thread_id: str) -> None:
    """Every checkpoint, blob and write of the source under the target. Each namespace's head is read
    before anything is listed and written last, as read: a put to the source meanwhile may add keys
    to the copy, but the target's latest is a checkpoint that was copied whole."""
    source_key, target_key = keys.thread_key(str(source_thread_id)), keys.thread_key(str(target_thread_id))
    source, target = saver._thread(source_key), saver._thread(target_key)
    heads = {name: source.get(name) for name, _ in list(source.keys(f"{keys.HEAD}."))}
    names = [name for name, _ in source.keys() if not name.startswith(f"{keys.HEAD}.")]
    if not names:
        return
    saver._register(str(target_thread_id), target_key)
    runs: set[tuple[str, str]] = set()
    for start in range(0, len(names), MAX_BATCH_OPS):
        with target.batch() as batch:
            for name in names[start : start + MAX_BATCH_OPS]:
                value = source.get(name)
                if value is None:
                    continue  # deleted since it was listed
                batch.put(name, value)
                if name.startswith(f"{keys.CHECKPOINT}.") and value.get("run_id") is not None:
                    runs.add((value["run_id"], value["ns"]))
    with target.batch() as batch:
        for name, head in heads.items():
            if head is not None:
                batch.put(name, {key: value for key, value in head.items() if key != turns.CLAIM})
    index = saver._index()
    index.put(keys.thread_entry(target_key), {"thread_id": str(target_thread_id)})
    for run_id, ns in sorted(runs):
        index.append(keys.run_entry(run_id), [[target_key, ns]])
    saver._forget(target_key)
    saver._known.add(target_key)


def delete_for_runs(saver: KeepstateSaver, run_ids: Sequence[str]) -> None:
    """Every checkpoint the runs wrote, with its writes, in every thread (the thread's latest
    becomes its newest remaining checkpoint)."""
    index = saver._index()
    for run_id in run_ids:
        for thread_key, ns in {tuple(entry) for entry in all_items(index, keys.run_entry(str(run_id)))}:
            scope = saver._thread(thread_key)
            doomed = [record["id"] for record in saver._records(scope, ns) if record.get("run_id") == run_id]
            _delete_keys(
                scope,
                [
                    name
                    for checkpoint_id in doomed
                    for name in (keys.checkpoint(ns, checkpoint_id), keys.writes(ns, checkpoint_id))
                ],
            )
            _repoint_head(saver, scope, ns)
            saver._forget(thread_key)
        index.delete(keys.run_entry(str(run_id)))


def _repoint_head(saver: KeepstateSaver, scope: Scope, ns: str) -> None:
    """When the head's checkpoint is gone, point the head at the newest one left (no head when none
    is): a compare-and-set over the head as read, so a put that moved it meanwhile is never undone."""
    for attempt in range(UPDATE_TRIES):
        head = scope.get_versioned(keys.head(ns))
        if not head.version or scope.get(keys.checkpoint(ns, head.value["id"])) is not None:
            return
        newest = next(saver._records(scope, ns), None)
        try:
            if newest is None:
                scope.delete(keys.head(ns), if_version=head.version)
            else:
                scope.put(keys.head(ns), {"id": newest["id"], "ns": ns}, if_version=head.version)
            return
        except VersionConflict:
            time.sleep(backoff_seconds(attempt))
    raise VersionConflict(f"the head of namespace {ns!r} kept moving while its checkpoint was repointed")


def prune(saver: KeepstateSaver, thread_ids: Sequence[str], strategy: str) -> None:
    """``keep_latest``: each namespace keeps its latest checkpoint and that one's writes, its list
    channels rewritten as snapshots so nothing older is needed; ``delete``: the whole thread."""
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
    for thread_id in thread_ids:
        if strategy == "delete":
            delete_thread(saver, thread_id)
        else:
            _keep_latest(saver, str(thread_id))


def _keep_latest(saver: KeepstateSaver, thread_id: str) -> None:
    """The keys are listed before the heads are read: a put landing in between or after adds keys the
    listing does not hold, and the checkpoint it makes the latest is the one kept."""
    thread_key = keys.thread_key(thread_id)
    scope = saver._thread(thread_key)
    listed = [key for key, _ in scope.keys() if _prunable(key)]
    kept: set[str] = set()
    for head_key, _ in list(scope.keys(f"{keys.HEAD}.")):
        head = scope.get(head_key)
        record = None if head is None else saver._latest(scope, head["ns"])
        if record is not None:
            kept |= _snapshot(saver, scope, thread_key, record)
    _delete_keys(scope, [key for key in listed if key not in kept and _owner(key) not in kept])
    saver._forget(thread_key)


def _snapshot(saver: KeepstateSaver, scope: Scope, thread_key: str, record: dict[str, Any]) -> set[str]:
    """Rewrite the checkpoint's delta blobs as full ones, each over the version read (one rewritten or
    deleted meanwhile is left as it is); the keys it still needs."""
    ns = record["ns"]
    needed = {keys.checkpoint(ns, record["id"]), keys.writes(ns, record["id"])}
    for channel, version in record["versions"].items():
        name = keys.blob(ns, channel, version)
        needed.add(name)
        stored = scope.get_versioned(name)
        if stored.version and "base" in stored.value:
            side = saver._side(scope, thread_key, ns, channel, version)
            snapshot = blobs.full(saver.serde, side.value)
            parted = blobs.split(snapshot)
            with suppress(VersionConflict), scope.batch() as batch:
                if parted is not None:
                    snapshot, parts = parted
                    for index, part in enumerate(parts):
                        batch.put(keys.blob_part(name, index), part)
                batch.put(name, snapshot, if_version=stored.version)
    return needed


def _delete_keys(scope: Scope, names: Sequence[str]) -> None:
    for start in range(0, len(names), MAX_BATCH_OPS):
        with scope.batch() as batch:
            for name in names[start : start + MAX_BATCH_OPS]:
                batch.delete(name)


def _prunable(key: str) -> bool:
    return key.startswith((f"{keys.CHECKPOINT}.", f"{keys.BLOB}.", f"{keys.WRITES}."))


def _owner(key: str) -> str:
    """The blob a snapshot part belongs to (``blob.ns.channel.version.pN``); else the key itself."""
    return key.rsplit(".", 1)[0] if key.startswith(f"{keys.BLOB}.") and key.count(".") == 4 else key


def all_items(scope: Scope, key: str) -> list[Any]:
    """Every item of a list, page by page ([] when absent)."""
    page = scope.items(key, 0, MAX_LIST_READ)
    found = list(page.items)
    while len(found) < page.length:
        page = scope.items(key, len(found), MAX_LIST_READ)
        if not page.items:
            break
        found += page.items
    return found
