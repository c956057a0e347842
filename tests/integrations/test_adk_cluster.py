"""ADK sessions on a store whose batches stay in one scope (a Redis Cluster): refused when the service is
made, with the reason, before anything is opened or written."""

from __future__ import annotations

import pytest

import keepstate
from backends import lacking
from keepstate.errors import InvalidRequest
from keepstate.integrations.adk import KeepstateSessionService

pytestmark = pytest.mark.parametrize("backend_url", lacking("cross_scope_batches"), indirect=True)


def test_the_service_refuses_a_store_without_batches_across_scopes(backend_url: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        KeepstateSessionService(backend_url)
    message = refused.value.message
    assert "app: and user: state" in message and "Redis Cluster" in message and "redis://" in message
    with keepstate.open(backend_url) as store:
        with pytest.raises(InvalidRequest):
            KeepstateSessionService.from_store(store)
        assert store.scope("agent", agent="chat").put("still", "open") == 1  # the store itself is untouched
