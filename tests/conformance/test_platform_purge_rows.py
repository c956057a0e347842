"""A purge's rows, on the stores whose rows can be read back (``dump``: SQLite and PostgreSQL): the
invocations of purged runs go with them, every other row stays."""

from __future__ import annotations

import pytest
from test_platform_lifecycle import every_status

from backends import declaring
from keepstate.clock import now_ms
from keepstate.stores.base import PlatformFacet
from keepstate.stores.records import FINAL

pytestmark = pytest.mark.parametrize("backend_url", declaring("platform", "shared"), indirect=True)


async def test_purged_runs_take_their_invocations_and_nothing_else(repo: PlatformFacet) -> None:
    runs = await every_status(repo)
    keep = {run.id for name, run in runs.items() if name not in FINAL}
    assert {row["run_id"] for row in await repo.dump("ks_invocations")} == {run.id for run in runs.values()}
    sessions, keys = await repo.dump("ks_sessions"), await repo.dump("ks_keys")
    await repo.purge_runs(now_ms() + 1, 1000)
    assert {row["run_id"] for row in await repo.dump("ks_invocations")} == keep
    assert {row["id"] for row in await repo.dump("ks_runs")} == keep
    assert (await repo.dump("ks_sessions"), await repo.dump("ks_keys")) == (sessions, keys)
