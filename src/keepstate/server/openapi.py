"""The OpenAPI 3.1 document of the HTTP API, written as data (served at ``/openapi.json``).

Small helpers build the repetitive parts (errors, auth, JSON bodies); the schemas mirror the
records of ``keepstate.stores.records`` and the State API of the spec.
"""

from __future__ import annotations

from typing import Any

from ..platform.forking import MAX_KEEP
from ..platform.service import QUEUE_TIMEOUT_RANGE_S
from ..protocol import MAX_EMIT_EVENTS, MAX_EVENT_TYPE, MAX_KEY_NAME
from ..stores.records import MULTITASK, RUN_STATUSES

Obj = dict[str, Any]
ANY: Obj = {}
STR: Obj = {"type": "string"}
INT: Obj = {"type": "integer"}
NAME: Obj = {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,200}$"}


def ref(name: str) -> Obj:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str], **props: Obj) -> Obj:
    return {"type": "object", "required": required, "properties": props}


def nullable(schema: Obj) -> Obj:
    return {"anyOf": [schema, {"type": "null"}]}


def body(schema: Obj, required: bool = True) -> Obj:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def ok(schema: Obj, description: str = "OK") -> Obj:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def errors(*statuses: int) -> Obj:
    answers = {str(s): {"$ref": f"#/components/responses/E{s}"} for s in (400, 401, *statuses, 503)}
    return answers


def op(
    summary: str, answers: Obj, *, security: str = "key", request: Obj | None = None, params: list[Obj] | None = None
) -> Obj:
    found: Obj = {"summary": summary, "responses": answers, "security": [{security: []}]}
    if request is not None:
        found["requestBody"] = request
    if params:
        found["parameters"] = params
    return found


def path_param(name: str) -> Obj:
    return {"name": name, "in": "path", "required": True, "schema": STR}


def query(name: str, schema: Obj, description: str = "") -> Obj:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


PAGE = [query("after", STR, "the `next` of the previous page"), query("limit", {**INT, "minimum": 1, "maximum": 1000})]
SCOPE: Obj = {"name": "scope", "in": "path", "required": True, "schema": {"enum": ["run", "session", "agent", "user"]}}
KEY = {"name": "key", "in": "path", "required": True, "schema": NAME}
RUN_ANSWER = ok(ref("Run"))
ENDED = ok(obj(["ok", "run_id", "status"], ok={"type": "boolean"}, run_id=STR, status=STR))

SCHEMAS: Obj = {
    "Error": {
        **obj(["error", "message"], error=STR, message=STR, path=STR, current_version=INT, retry_after=INT),
        "additionalProperties": True,
    },
    "Key": obj(
        ["id", "role", "name", "created_at"],
        id=STR,
        role={"enum": ["admin", "member", "worker"]},
        name=nullable(STR),
        created_at=INT,
    ),
    "Session": obj(
        ["id", "owner", "user", "metadata", "created_at", "parent"],
        id=NAME,
        owner=STR,
        user=nullable(NAME),
        metadata={"type": "object"},
        created_at=INT,
        parent=nullable(NAME),
    ),
    "Run": obj(
        [
            "id",
            "agent",
            "session_id",
            "user",
            "parent_id",
            "status",
            "input",
            "output",
            "error",
            "hold",
            "decision",
            "created_at",
            "updated_at",
        ],
        id=STR,
        agent=NAME,
        session_id=nullable(NAME),
        user=nullable(NAME),
        parent_id=nullable(STR),
        status={"enum": list(RUN_STATUSES)},
        input=ANY,
        output=ANY,
        error=ANY,
        hold=ANY,
        decision=ANY,
        cancel_requested={"type": "boolean"},
        queue_deadline=nullable(INT),
        created_at=INT,
        updated_at=INT,
    ),
    "Event": obj(
        ["seq", "type", "data", "at"],
        seq={**INT, "minimum": 1, "description": "1, 2, 3... per run, across its invocations"},
        type={"type": "string", "pattern": f"^[a-z0-9._-]{{1,{MAX_EVENT_TYPE}}}$"},
        data=ANY,
        at={**INT, "description": "the server's time, ms since the epoch"},
    ),
    "Document": obj(
        ["path", "text", "metadata", "version", "updated_at"],
        path=STR,
        text=STR,
        metadata={"type": "object"},
        version=INT,
        updated_at=INT,
    ),
    "DocumentInfo": obj(["path", "version", "updated_at"], path=STR, version=INT, updated_at=INT),
    "Hit": obj(["path", "score", "snippet", "version"], path=STR, score={"type": "number"}, snippet=STR, version=INT),
    "Agent": obj(
        ["name", "last_claim_at", "queued", "running", "held"],
        name=NAME,
        last_claim_at=nullable(INT),
        queued=INT,
        running=INT,
        held=INT,
    ),
    "Invocation": obj(
        [
            "id",
            "run_id",
            "agent",
            "kind",
            "input",
            "decision",
            "session_id",
            "user",
            "parent_id",
            "token",
            "lease_seconds",
        ],
        id=STR,
        run_id=STR,
        agent=NAME,
        kind={"enum": ["start", "resume"]},
        input=ANY,
        decision=ANY,
        session_id=nullable(NAME),
        user=nullable(NAME),
        parent_id=nullable(STR),
        token=STR,
        lease_seconds={"type": "number"},
    ),
}

ERROR_TEXT = {
    400: "invalid_key, invalid_value (with path) or invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "version_conflict (current_version; conflicts for a batch), not_a_list, not_an_integer, "
    "no_session, no_user, no_embedder, session_busy, not_held, session_locked, lease_lost, "
    "idempotency_in_flight (an Idempotency-Key's first write still being applied after 10 s)",
    413: "too_large",
    422: "idempotency_mismatch (an Idempotency-Key used again with another route or body)",
    503: "unavailable (header Retry-After)",
}
RESPONSES = {f"E{status}": ok(ref("Error"), text) for status, text in ERROR_TEXT.items()}

PATHS: Obj = {
    "/v0/keys": {
        "post": op(
            "Create a key (admin); the secret is shown once",
            {
                "201": ok(obj(["id", "key", "role", "name"], id=STR, key=STR, role=STR, name=nullable(STR))),
                **errors(403),
            },
            request=body(
                obj(["role"], role={"enum": ["admin", "member", "worker"]}, name={**STR, "maxLength": MAX_KEY_NAME})
            ),
        ),
        "get": op(
            "List the environment's keys (admin), without secrets",
            {"200": ok(obj(["keys"], keys={"type": "array", "items": ref("Key")})), **errors(403)},
        ),
    },
    "/v0/keys/{id}": {
        "delete": op(
            "Revoke a key (admin)", {"204": {"description": "revoked"}, **errors(403, 404)}, params=[path_param("id")]
        )
    },
    "/v0/sessions": {
        "post": op(
            "Create a session; the same id again by its owner answers 200 with it",
            {"201": ok(ref("Session")), "200": ok(ref("Session")), **errors(403, 413)},
            request=body(obj([], id=NAME, user=NAME, metadata={"type": "object"}), required=False),
        ),
        "get": op(
            "List sessions, oldest first (own; admin: all)",
            {
                "200": ok(
                    obj(["sessions", "next"], sessions={"type": "array", "items": ref("Session")}, next=nullable(STR))
                ),
                **errors(403),
            },
            params=[query("user", NAME), *PAGE],
        ),
    },
    "/v0/sessions/{id}": {
        "get": op(
            "Get a session (owner, admin)", {"200": ok(ref("Session")), **errors(403, 404)}, params=[path_param("id")]
        ),
        "patch": op(
            "Replace a session's metadata (owner, admin)",
            {"200": ok(ref("Session")), **errors(403, 404, 413)},
            params=[path_param("id")],
            request=body(obj(["metadata"], metadata={"type": "object"})),
        ),
        "delete": op(
            "Delete a session and its session-scope state",
            {"204": {"description": "deleted"}, **errors(403, 404, 409)},
            params=[path_param("id")],
        ),
    },
    "/v0/sessions/{id}/fork": {
        "post": op(
            "Fork a session (owner, admin): a new session of the caller, `parent` the source, holding a copy of "
            "the source's session-scope state as of one instant; each list named in `lists` (`AGENT/KEY` to N) "
            "cut to its first N items (409 `not_a_list` for another value, and no session is made); `user` "
            "defaults to the source's; the same id again from the same source answers 200 with it",
            {"201": ok(ref("Session")), "200": ok(ref("Session")), **errors(403, 404, 409, 413)},
            params=[path_param("id")],
            request=body(
                obj(
                    [],
                    id=NAME,
                    user=NAME,
                    metadata={"type": "object"},
                    lists={"type": "object", "additionalProperties": {**INT, "minimum": 0, "maximum": MAX_KEEP}},
                ),
                required=False,
            ),
        ),
    },
    "/v0/runs": {
        "post": op(
            "Start a run (a turn); with a run token, a child run",
            {
                "202": ok(ref("Run")),
                "200": ok(ref("Run"), "the first run of this idempotency key"),
                **errors(403, 404, 409, 413),
            },
            request=body(
                obj(
                    ["agent"],
                    agent=NAME,
                    input=ANY,
                    session_id=NAME,
                    idempotency_key=NAME,
                    queue_timeout={
                        "type": "number",
                        "minimum": QUEUE_TIMEOUT_RANGE_S[0],
                        "maximum": QUEUE_TIMEOUT_RANGE_S[1],
                    },
                    multitask={
                        "enum": list(MULTITASK),
                        "description": "while a run of the session is queued or running: reject (409 session_busy, "
                        "the default), enqueue (wait for the session, in start order) or interrupt (cancel its "
                        "queued runs, request the cancel of its running one, then wait)",
                    },
                )
            ),
        ),
        "get": op(
            "List runs, oldest first (own; admin: all)",
            {
                "200": ok(obj(["runs", "next"], runs={"type": "array", "items": ref("Run")}, next=nullable(STR))),
                **errors(403),
            },
            params=[query("session_id", NAME), query("status", SCHEMAS["Run"]["properties"]["status"]), *PAGE],
        ),
    },
    "/v0/runs/{id}": {
        "get": op(
            "Get a run; with wait, once it is no longer queued or running",
            {"200": RUN_ANSWER, **errors(403, 404)},
            params=[path_param("id"), query("wait", {"type": "number", "maximum": 60})],
        )
    },
    "/v0/runs/{id}/decision": {
        "post": op(
            "Decide a held run: it is queued for its resume",
            {"200": RUN_ANSWER, **errors(403, 404, 409, 413)},
            params=[path_param("id")],
            request=body(obj(["approved"], approved={"type": "boolean"}, data=ANY)),
        )
    },
    "/v0/runs/{id}/cancel": {
        "post": op(
            "Cancel a run (queued/held now; running: requested)",
            {"200": RUN_ANSWER, **errors(403, 404)},
            params=[path_param("id")],
        )
    },
    "/v0/runs/{id}/events": {
        "get": op(
            "A run's events after `after`, in seq order (owner, admin). `next`: the `after` of the next call, null "
            "once this page holds the run's last event (its final status). With `Accept: text/event-stream`: "
            "Server-Sent Events (`id: SEQ`, `event: TYPE`, `data:` the event as JSON) from `after` or the "
            "`Last-Event-ID` header, a comment line at least every 15 s while idle, ending after the run's "
            "final event",
            {
                "200": {
                    "description": "a page of events, or their stream",
                    "content": {
                        "application/json": {
                            "schema": obj(
                                ["events", "next"], events={"type": "array", "items": ref("Event")}, next=nullable(INT)
                            )
                        },
                        "text/event-stream": {"schema": STR},
                    },
                },
                **errors(403, 404),
            },
            params=[
                path_param("id"),
                query("after", {**INT, "minimum": 0}, "the seq to read after (0: from the start)"),
                query("limit", {**INT, "minimum": 1, "maximum": 1000}),
            ],
        )
    },
    "/v0/agents": {
        "get": op(
            "The environment's agents: those a worker claimed for and those with runs, with their active runs",
            {"200": ok(obj(["agents"], agents={"type": "array", "items": ref("Agent")})), **errors(403)},
        )
    },
    "/v0/invocations/claim": {
        "post": op(
            "Claim the oldest queued invocation of these agents (worker, admin); 204 when none came within wait",
            {"200": ok(ref("Invocation")), "204": {"description": "nothing to do"}, **errors(403)},
            request=body(
                obj(
                    ["agents"],
                    agents={"type": "array", "items": NAME, "minItems": 1, "maxItems": 100},
                    wait={"type": "number", "minimum": 0, "maximum": 30},
                )
            ),
        )
    },
    "/v0/invocations/{id}/heartbeat": {
        "post": op(
            "Extend the invocation's lease",
            {
                "200": ok(
                    obj(
                        ["lease_seconds", "cancel_requested"],
                        lease_seconds={"type": "number"},
                        cancel_requested={"type": "boolean"},
                    )
                )
            }
            | errors(),
            security="runToken",
            params=[path_param("id")],
        )
    },
    "/v0/invocations/{id}/events": {
        "post": op(
            f"Append 1-{MAX_EMIT_EVENTS} events to the run's log, all or none (`type` defaults to `message`; "
            "types starting `run.` are the platform's); 413 past 64 KiB of data, 100 events, or 10,000 in the "
            "run's log",
            {
                "200": ok(
                    obj(
                        ["seq", "cancel_requested"],
                        seq={**INT, "description": "the seq of the last event written"},
                        cancel_requested={"type": "boolean"},
                    )
                ),
                **errors(413),
            },
            security="runToken",
            params=[path_param("id")],
            request=body(
                obj(
                    ["events"],
                    events={
                        "type": "array",
                        "minItems": 1,
                        "maxItems": MAX_EMIT_EVENTS,
                        "items": {
                            **obj(["data"], type=SCHEMAS["Event"]["properties"]["type"], data=ANY),
                            "additionalProperties": False,
                        },
                    },
                )
            ),
        )
    },
    "/v0/invocations/{id}/complete": {
        "post": op(
            "End the invocation: run done",
            {"200": ENDED, **errors(413)},
            security="runToken",
            params=[path_param("id")],
            request=body(obj([], output=ANY), required=False),
        )
    },
    "/v0/invocations/{id}/fail": {
        "post": op(
            "End the invocation: run failed",
            {"200": ENDED, **errors(413)},
            security="runToken",
            params=[path_param("id")],
            request=body(obj(["error"], error=obj(["type", "message"], type=STR, message=STR))),
        )
    },
    "/v0/invocations/{id}/hold": {
        "post": op(
            "End the invocation: run held for a decision",
            {"200": ENDED, **errors(413)},
            security="runToken",
            params=[path_param("id")],
            request=body(obj([], request=ANY), False),
        )
    },
    "/healthz": {"get": {"summary": "Liveness", "responses": {"200": ok(obj(["ok"], ok={"type": "boolean"}))}}},
    "/readyz": {
        "get": {
            "summary": "Readiness: the store answers",
            "responses": {"200": ok(obj(["ok"], ok={"type": "boolean"})), "503": ok(ANY, "the store does not answer")},
        }
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus metrics",
            "responses": {"200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": STR}}}},
        }
    },
    "/openapi.json": {"get": {"summary": "This document", "responses": {"200": ok({"type": "object"})}}},
}

TTL: Obj = {"type": "number", "exclusiveMinimum": 0, "description": "expire that long after this write"}
IF_VERSION: Obj = {**INT, "minimum": 0}
LISTED = ok(
    obj(
        ["keys", "next"],
        keys={"type": "array", "items": obj(["key", "version"], key=NAME, version=INT)},
        next=nullable(STR),
    )
)
SIZED = ok(obj(["version", "length"], version=INT, length=INT))
VALUED = ok(obj(["value", "version"], value=ANY, version=INT))
PART = ok(
    obj(["items", "version", "length"], items={"type": "array"}, version=INT, length=INT),
    "with tail or start/limit: part of a list",
)


def state_paths(prefix: str, params: list[Obj], security: str) -> Obj:
    """The State API's calls under one prefix: ``/v0/state/{scope}`` (run token) or a caller's."""
    key = [*params, KEY]
    read_params = [
        *key,
        query("tail", {**INT, "minimum": 1, "maximum": 1000}),
        query("start", {**INT, "minimum": 0}),
        query("limit", {**INT, "minimum": 1, "maximum": 1000}),
    ]
    listed = {
        "get": op(
            "List keys in key order",
            {"200": LISTED, **errors(403, 404, 409)},
            security=security,
            params=[*params, query("prefix", STR), *PAGE],
        )
    }
    return {
        prefix: listed,
        f"{prefix}/": listed,
        f"{prefix}/{{key}}": {
            "get": op(
                "Read a value (its expires_at when it has one), or part of a list",
                {
                    "200": ok(
                        {
                            "anyOf": [
                                obj(["value", "version"], value=ANY, version=INT, expires_at=INT),
                                PART["content"]["application/json"]["schema"],
                            ]
                        }
                    ),
                    **errors(403, 404, 409),
                },
                security=security,
                params=read_params,
            ),
            "put": op(
                "Write a value; if_version 0 means only if absent; without ttl_seconds any expiry is cleared",
                {"200": ok(obj(["version"], version=INT)), **errors(403, 404, 409, 413)},
                security=security,
                params=key,
                request=body(obj(["value"], value=ANY, if_version=IF_VERSION, ttl_seconds=TTL)),
            ),
            "patch": op(
                "Apply a JSON Merge Patch (RFC 7396) in the store; an absent key is {}",
                {"200": VALUED, **errors(403, 404, 409, 413)},
                security=security,
                params=key,
                request=body(obj(["patch"], patch=ANY, if_version=IF_VERSION, ttl_seconds=TTL)),
            ),
            "delete": op(
                "Delete a value (204 also when absent)",
                {"204": {"description": "deleted"}, **errors(403, 404, 409)},
                security=security,
                params=[*key, query("if_version", IF_VERSION)],
            ),
        },
        f"{prefix}/{{key}}/append": {
            "post": op(
                "Append items atomically, creating the list if needed",
                {"200": SIZED, **errors(403, 404, 409, 413)},
                security=security,
                params=key,
                request=body(obj(["items"], items={"type": "array"}, ttl_seconds=TTL)),
            )
        },
        f"{prefix}/{{key}}/trim": {
            "post": op(
                "Drop the oldest items so that at most keep_last remain",
                {"200": SIZED, **errors(403, 404, 409)},
                security=security,
                params=key,
                request=body(
                    obj(["keep_last"], keep_last={**INT, "minimum": 0}, if_version=IF_VERSION, ttl_seconds=TTL)
                ),
            )
        },
        f"{prefix}/{{key}}/pop": {
            "post": op(
                "Remove and return the last item; 404 when absent or empty",
                {
                    "200": ok(obj(["item", "version", "length"], item=ANY, version=INT, length=INT)),
                    **errors(403, 404, 409),
                },
                security=security,
                params=key,
                request=body(obj([], if_version=IF_VERSION), required=False),
            )
        },
        f"{prefix}/{{key}}/incr": {
            "post": op(
                "Add to an integer in the store; an absent key counts from 0",
                {"200": VALUED, **errors(403, 404, 409)},
                security=security,
                params=key,
                request=body(obj([], by=INT, if_version=IF_VERSION, ttl_seconds=TTL), required=False),
            )
        },
    }


AGENT = path_param("agent")
BATCH_OP: Obj = {
    **obj(
        ["op", "scope", "key"],
        op={"enum": ["put", "delete", "append", "incr", "patch", "trim"]},
        scope=SCOPE["schema"],
        key=NAME,
        value=ANY,
        items={"type": "array"},
        by=INT,
        patch=ANY,
        keep_last={**INT, "minimum": 0},
        if_version=IF_VERSION,
        ttl_seconds=TTL,
    )
}
PATHS.update(state_paths("/v0/state/{scope}", [SCOPE], "runToken"))
PATHS.update(state_paths("/v0/sessions/{id}/state/{agent}", [path_param("id"), AGENT], "key"))
PATHS.update(state_paths("/v0/runs/{id}/state", [path_param("id")], "key"))
PATHS.update(state_paths("/v0/agents/{agent}/state", [AGENT], "key"))
PATHS.update(state_paths("/v0/users/{user}/state/{agent}", [path_param("user"), AGENT], "key"))
PATHS["/v0/state/batch"] = {
    "post": op(
        "Apply 1-100 writes to the run's scopes atomically: all or none; every if_version conflict listed",
        {"200": ok(obj(["results"], results={"type": "array"})), **errors(409, 413)},
        security="runToken",
        request=body(obj(["ops"], ops={"type": "array", "items": BATCH_OP, "minItems": 1, "maxItems": 100})),
    )
}

DOC_PATH = {
    "name": "path",
    "in": "path",
    "required": True,
    "schema": STR,
    "description": "1-512 of A-Z a-z 0-9 . _ - / in segments; users/{user}/... is the end user's folder",
}


def memory_paths(prefix: str, security: str, params: list[Obj], who: str) -> Obj:
    """The five memory calls under one prefix (a run token's, an admin's), with that prefix's parameters."""
    listing = ok(
        obj(["documents", "next"], documents={"type": "array", "items": ref("DocumentInfo")}, next=nullable(STR))
    )
    hits = ok(obj(["hits"], hits={"type": "array", "items": ref("Hit")}))
    search_body = body(
        obj(
            ["query"],
            query=STR,
            prefix=STR,
            limit={**INT, "minimum": 1},
            mode={
                "type": "string",
                "enum": ["text", "semantic", "hybrid"],
                "description": "text: words; semantic: nearest in meaning (score: cosine similarity); hybrid: both, "
                "fused by reciprocal rank. Default: hybrid with an embedder, else text; semantic or hybrid "
                "without one is 409 no_embedder",
            },
            filter={
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                "description": "only documents whose metadata has each of these top-level fields with this value",
            },
        )
    )
    write_body = body(obj(["text"], text=STR, metadata={"type": "object"}, if_version={**INT, "minimum": 0}))
    return {
        prefix: {
            "get": op(
                f"List documents in path order ({who})",
                {"200": listing, **errors(403, 404, 409)},
                security=security,
                params=[*params, query("prefix", STR), *PAGE],
            )
        },
        f"{prefix}/search": {
            "post": op(
                f"Search documents, best first ({who})",
                {"200": hits, **errors(403, 404, 409)},
                security=security,
                params=params,
                request=search_body,
            )
        },
        f"{prefix}/{{path}}": {
            "get": op(
                f"Read a document ({who})",
                {"200": ok(ref("Document")), **errors(403, 404, 409)},
                security=security,
                params=[*params, DOC_PATH],
            ),
            "put": op(
                f"Write a document; if_version 0 means only if absent ({who})",
                {"200": ok(obj(["version"], version=INT)), **errors(403, 404, 409, 413)},
                security=security,
                params=[*params, DOC_PATH],
                request=write_body,
            ),
            "delete": op(
                f"Delete a document (204 also when absent) ({who})",
                {"204": {"description": "deleted"}, **errors(403, 404, 409)},
                security=security,
                params=[*params, DOC_PATH, query("if_version", {**INT, "minimum": 0})],
            ),
        },
    }


USER = path_param("user")
PATHS.update(memory_paths("/v0/memory", "runToken", [], "the run's agent, as its end user"))
PATHS.update(memory_paths("/v0/agents/{agent}/memory", "key", [AGENT], "admin: every folder"))
PATHS.update(memory_paths("/v0/users/{user}/memory/{agent}", "key", [USER, AGENT], "admin: as that end user"))

FENCE: Obj = {**INT, "minimum": 1, "description": "the fence of a lease of this session"}
MILLIS: Obj = {**INT, "minimum": 0, "description": "ms since the epoch"}
LEASE_TTL: Obj = {**INT, "minimum": 1, "maximum": 3_600_000}


def session_store_paths(prefix: str) -> Obj:
    """A session store's session: state calls fenced by the lease calls beside them."""
    params = [path_param("space"), path_param("id")]
    fenced = errors(403, 409)
    lease_answer = ok(obj(["fence", "expires_at"], fence=INT, expires_at=INT))
    wait: Obj = {**INT, "minimum": 0, "description": "ms to wait for the lease (at most 30000)"}
    stored = obj(["state", "version", "expires_at"], state={"type": "object"}, version=INT, expires_at=nullable(INT))

    def call(summary: str, answer: Obj, request: Obj | None = None, more: list[Obj] | None = None) -> Obj:
        return op(summary, answer, request=request, params=[*params, *(more or [])])

    return {
        prefix: {
            "get": call("A session (also after expires_at)", {"200": ok(stored), **errors(403, 404)}),
            "put": call(
                "Write a session's state (any JSON object up to 1 MiB)",
                {"200": ok(obj(["version"], version=INT)), **fenced, **errors(413)},
                body(obj(["state"], state={"type": "object"}, expires_at=nullable(MILLIS), fence=FENCE)),
            ),
            "delete": call(
                "Delete a session (204 also when absent)",
                {"204": {"description": "deleted"}, **fenced},
                more=[query("fence", FENCE)],
            ),
        },
        f"{prefix}/touch": {
            "post": call(
                "Move a session's expiry",
                {"200": ok(ANY), **fenced},
                body(obj(["expires_at"], expires_at=MILLIS, fence=FENCE)),
            )
        },
        f"{prefix}/lease": {
            "post": call(
                "Take the session's lease; 409 session_locked after wait_ms",
                {"200": lease_answer, **fenced},
                body(obj(["ttl_ms"], ttl_ms=LEASE_TTL, wait_ms=wait)),
            )
        },
        f"{prefix}/lease/renew": {
            "post": call(
                "Extend a lease; 409 lease_lost when a newer one exists",
                {"200": ok(obj(["expires_at"], expires_at=INT)), **fenced},
                body(obj(["fence", "ttl_ms"], fence=FENCE, ttl_ms=LEASE_TTL)),
            )
        },
        f"{prefix}/lease/release": {
            "post": call(
                "Free a lease (a stale fence changes nothing)",
                {"204": {"description": "released"}, **errors(403)},
                body(obj(["fence"], fence=FENCE)),
            )
        },
    }


PATHS.update(session_store_paths("/v0/session-stores/{space}/sessions/{id}"))

IDEMPOTENCY_KEY: Obj = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": NAME,
    "description": "Apply this write once: a repeat with the same key (the caller's own), route and body "
    "answers the first answer again with `Idempotent-Replayed: true` and writes nothing; kept 24 hours",
}
REPLAYED: Obj = {"description": "`true` on an answer given before to this Idempotency-Key", "schema": STR}
WRITES = ("put", "patch", "delete", "post")
"""Every such operation of these paths is a write that takes an ``Idempotency-Key``."""


def idempotent(path: str) -> bool:
    """The write routes of ``http-api.md``'s "Idempotent writes": state, runs, decisions, cancels, events,
    complete/fail/hold (not keys, sessions, memory or session stores)."""
    if "/state" in path:
        return True
    tails = ("/decision", "/cancel", "/events", "/complete", "/fail", "/hold")
    return path == "/v0/runs" or (path.startswith(("/v0/runs/", "/v0/invocations/")) and path.endswith(tails))


def with_idempotency_keys(paths: Obj) -> None:
    """The header, its replay mark and its two refusals on every idempotent write."""
    for path, methods in paths.items():
        if not idempotent(path):
            continue
        for method, operation in methods.items():
            if method not in WRITES:
                continue
            operation["parameters"] = [*operation.get("parameters", []), IDEMPOTENCY_KEY]
            operation["responses"].setdefault("409", {"$ref": "#/components/responses/E409"})
            operation["responses"]["422"] = {"$ref": "#/components/responses/E422"}
            for status, answer in operation["responses"].items():
                if status.startswith("2") and "$ref" not in answer:
                    answer["headers"] = {"Idempotent-Replayed": REPLAYED}


with_idempotency_keys(PATHS)

DOCUMENT: Obj = {
    "openapi": "3.1.0",
    "info": {
        "title": "keepstate",
        "version": "0",
        "description": "Durable state, sessions and exclusive turns for AI agents. Errors: "
        "{error, message, ...details}; branch on `error`.",
    },
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "responses": RESPONSES,
        "securitySchemes": {
            "key": {"type": "http", "scheme": "bearer", "description": "an admin, member or worker key"},
            "runToken": {"type": "apiKey", "in": "header", "name": "x-agentos-run-token"},
        },
    },
}
