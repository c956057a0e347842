"""The HTTP API's fixed names and bounds, shared by the server and the SDK: one copy of each.

Value limits (sizes, nesting) are ``keepstate.values``'; these are the protocol's own.
"""

from __future__ import annotations

RUN_TOKEN_HEADER = "x-agentos-run-token"
"""The header carrying a run token (the seed's name, so seed agents work unchanged)."""

DEFAULT_PAGE = 100
MAX_PAGE = 1000
"""A listing's ``limit``: its default and its largest (larger ones are clamped)."""

MAX_RUN_WAIT_S = 60.0
"""``GET /v0/runs/{id}?wait=`` holds the answer at most this long."""
MAX_CLAIM_WAIT_S = 30.0
"""``POST /v0/invocations/claim`` long-polls at most this long."""
MAX_AGENTS = 100
"""A claim names at most this many agents."""
