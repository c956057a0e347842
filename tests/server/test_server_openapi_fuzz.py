"""Schemathesis drives every operation of our own ``/openapi.json`` against a real server.

Generated requests (valid and invalid by the schema) must never get a 500, and every answer's
status and body must be what the document promises. Credentials: an admin key and the run token
of a running invocation with a session and an end user, so the state routes are reached too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from serverproc import ServerInfo, running_server

# The document describes shapes, not every value rule of keepstate.values (U+0000, 64-bit ints,
# 1 MiB...): schema-valid data may rightly be refused, and ignored extra fields are accepted. And
# every request here carries both credentials, so dropping one (ignored_auth) may rightly still
# work: a run token alone may start a child run. Auth refusals are tested route by route elsewhere.
LOOSER_THAN_THE_API = [
    schemathesis.checks.positive_data_acceptance,
    schemathesis.checks.negative_data_rejection,
    schemathesis.checks.ignored_auth,
]


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerInfo, dict[str, str]]]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    with running_server(f"sqlite:///{folder / 'fuzz.db'}", lease=3600) as info:
        admin = {"Authorization": f"Bearer {info.admin_key}"}
        with httpx.Client(base_url=info.url, timeout=10, headers=admin) as http:
            http.post("/v0/sessions", json={"id": "fuzz-session", "user": "fuzz-user"}).raise_for_status()
            http.post("/v0/runs", json={"agent": "fuzz", "session_id": "fuzz-session"}).raise_for_status()
            claimed = http.post("/v0/invocations/claim", json={"agents": ["fuzz"]}).json()
        yield info, {**admin, "x-agentos-run-token": claimed["token"]}


def test_every_operation_keeps_its_promises(fuzzed_server: tuple[ServerInfo, dict[str, str]]) -> None:
    info, headers = fuzzed_server
    schema = schemathesis.openapi.from_url(f"{info.url}/openapi.json")
    results = list(schema.get_all_operations())
    assert all(isinstance(result, Ok) for result in results), "every operation of the document is valid"
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) >= 20, "the document lists every route"
    for operation in operations:
        if (operation.method.upper(), operation.path) == ("DELETE", "/v0/keys/{key_id}"):
            continue  # revoking keys at random could revoke the fuzzer's own credential

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def call(case: schemathesis.Case[Any]) -> None:
            _no_long_polls(case)
            case.call_and_validate(headers=headers, timeout=70, excluded_checks=LOOSER_THAN_THE_API)

        call()


def _no_long_polls(case: schemathesis.Case[Any]) -> None:
    """Long polls answer after up to 30-60 s by design: keep the fuzzer's waits short."""
    if isinstance(case.query, dict) and "wait" in case.query:
        case.query["wait"] = "0.1"
    if isinstance(case.body, dict) and "wait" in case.body:
        case.body["wait"] = 0.1
    if isinstance(case.body, dict) and "wait_ms" in case.body:
        case.body["wait_ms"] = 100
