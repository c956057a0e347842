/**
 * Retries and timeouts, against a scripted local HTTP server that answers 503s, drops connections
 * or never answers — the failures a real keepstate server only shows under outages. What is
 * checked is the client's side: which calls are repeated, how long it waits, what it throws.
 */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import { after, before, beforeEach, describe, it } from "node:test";
import { Client, KeepstateError, type Scope, Unavailable, VersionConflict } from "keepstate";
import * as calls from "../dist/calls.js";
import type { Claim } from "../dist/records.js";
import { Scope as ScopeClass } from "../dist/scope.js";
import { callerTarget, runTokenTarget } from "../dist/state-calls.js";
import { buildConfig, type Call, repeatable, Sender } from "../dist/transport.js";
import { freePort, sleepMs } from "./support/server.js";

type Step = (request: IncomingMessage, response: ServerResponse) => void;

interface Seen {
  method: string;
  url: string;
  body: string;
  /** The request's `Idempotency-Key`, if it had one. */
  key: string | undefined;
}

/** A local server answering each request with the next step of its script (200 `{}` once it runs out). */
class Scripted {
  readonly seen: Seen[] = [];
  private steps: Step[] = [];
  private readonly http: HttpServer;

  constructor() {
    this.http = createServer((request, response) => {
      let body = "";
      request.on("data", (chunk: Buffer) => (body += chunk.toString()));
      request.on("end", () => {
        const key = request.headers["idempotency-key"];
        this.seen.push({ method: request.method ?? "", url: request.url ?? "", body, key: typeof key === "string" ? key : undefined });
        (this.steps.shift() ?? json(200, {}))(request, response);
      });
    });
  }

  listen(port = 0): Promise<string> {
    return new Promise((done) => this.http.listen(port, "127.0.0.1", () => {
      const address = this.http.address();
      done(`http://127.0.0.1:${typeof address === "object" && address ? address.port : port}`);
    }));
  }

  script(...steps: Step[]): void {
    this.seen.length = 0;
    this.steps = steps;
  }

  close(): Promise<void> {
    this.http.closeAllConnections?.();
    return new Promise((done) => this.http.close(() => done()));
  }
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}): Step => (_, response) => {
  response.writeHead(status, { "content-type": "application/json", ...headers });
  response.end(JSON.stringify(body));
};
const unavailable = (retryAfter: string): Step => json(503, { error: "unavailable", message: "store down" }, { "retry-after": retryAfter });
/** The request arrived, the answer never does: the connection is cut. */
const drop: Step = (request) => request.socket.destroy();
/** The request arrived, and the server just keeps it. */
const hang: Step = () => undefined;

let fake: Scripted;
let url: string;

describe("retries and timeouts", () => {
  before(async () => {
    fake = new Scripted();
    url = await fake.listen();
  });
  after(() => fake.close());
  beforeEach(() => fake.script());

  function client(options: { timeout?: number; retries?: number } = {}): Client {
    return new Client(url, { key: "ks_key", ...options });
  }

  function runScope(options: { timeout?: number } = {}): Scope {
    return new ScopeClass(new Sender(buildConfig(url, { key: "ks_key", ...options })), runTokenTarget("run", "tok")) as Scope;
  }

  async function thrown(promise: Promise<unknown>): Promise<unknown> {
    return promise.then(() => assert.fail("expected a rejection"), (error: unknown) => error);
  }

  describe("503 with Retry-After", () => {
    it("a GET waits the Retry-After seconds, then succeeds", async () => {
      fake.script(unavailable("1"), json(200, { id: "s1", owner: "k", user: null, metadata: {}, created_at: 1 }));
      const started = Date.now();
      const session = await client().sessions.get("s1");
      assert.equal(session.id, "s1");
      assert.equal(fake.seen.length, 2);
      assert.ok(Date.now() - started >= 950, `waited ${Date.now() - started} ms`);
    });

    it("a GET gives up after its retries with Unavailable and the server's retryAfter", async () => {
      fake.script(unavailable("0"), unavailable("0"), unavailable("0"), unavailable("7"));
      const error = await thrown(client({ retries: 3 }).sessions.get("s1"));
      assert.ok(error instanceof Unavailable);
      assert.equal(error.retryAfter, 7);
      assert.equal(error.status, 503);
      assert.equal(fake.seen.length, 4);
    });

    it("a write that takes no idempotency key is not repeated: session without id, key creation, deletes", async () => {
      const once = async (call: () => Promise<unknown>) => {
        fake.script(unavailable("0"));
        assert.ok((await thrown(call())) instanceof Unavailable);
        assert.equal(fake.seen.length, 1);
        assert.equal(fake.seen[0]?.key, undefined);
      };
      await once(() => client().sessions.create({ user: "u" }));
      await once(() => client().keys.create("member"));
      await once(() => client().sessions.delete("s1"));
      await once(() => client().keys.revoke("k1"));
    });

    it("every idempotent write is repeated with its key, guarded or not; a session with an id too", async () => {
      const twice = async (call: () => Promise<unknown>, answer: unknown) => {
        fake.script(unavailable("0"), json(200, answer));
        await call();
        assert.equal(fake.seen.length, 2);
        assert.equal(fake.seen[0]?.body, fake.seen[1]?.body);
        assert.equal(fake.seen[0]?.key, fake.seen[1]?.key);
      };
      await twice(() => runScope().append("log", [1]), { version: 1, length: 1 });
      await twice(() => runScope().put("k", 1), { version: 1 });
      await twice(() => runScope().put("k", 1, { ifVersion: 0 }), { version: 1 });
      await twice(() => runScope().delete("k", { ifVersion: 3 }), {});
      await twice(() => runScope().pop("q"), { item: 1, version: 2, length: 0 });
      await twice(() => client().runs.start("chat", {}), { id: "run_1", status: "queued" });
      await twice(() => client().runs.decide("run_1", { approved: true }), { id: "run_1", status: "queued" });
      await twice(() => client().runs.cancel("run_1"), { id: "run_1", status: "cancelled" });
      await twice(() => client().sessions.create({ id: "s-1" }), { id: "s-1" });
    });

    it("a 409 idempotency_in_flight is waited out; another 409 or a 422 is the answer", async () => {
      fake.script(json(409, { error: "idempotency_in_flight", message: "still applying" }), json(200, { value: 3, version: 3 }));
      assert.equal((await runScope().incr("n")).value, 3);
      assert.equal(fake.seen.length, 2);
      assert.equal(fake.seen[0]?.key, fake.seen[1]?.key);
      for (const [status, error] of [[409, "version_conflict"], [422, "idempotency_mismatch"]] as const) {
        fake.script(json(status, { error, message: "no" }));
        const refused = await thrown(runScope().incr("n"));
        assert.ok(refused instanceof KeepstateError);
        assert.deepEqual([refused.status, refused.code, fake.seen.length], [status, error, 1]);
      }
      fake.script(json(409, { error: "idempotency_in_flight", message: "still applying" }));
      assert.ok((await thrown(client().sessions.create({ user: "u" }))) instanceof KeepstateError, "no key: not waited out");
      assert.equal(fake.seen.length, 1);
    });

    it("a 502 or 504 of a GET is repeated too, with our own backoff", async () => {
      fake.script(json(502, "bad gateway"), json(504, "timeout"), json(200, { keys: [] }));
      assert.deepEqual(await client().keys.list(), []);
      assert.equal(fake.seen.length, 3);
    });
  });

  describe("lost answers", () => {
    it("a GET whose connection drops is repeated", async () => {
      fake.script(drop, json(200, { value: "v", version: 4 }));
      assert.deepEqual(await runScope().getVersioned("k"), { value: "v", version: 4 });
      assert.equal(fake.seen.length, 2);
    });

    it("an append whose connection drops is sent again with the same key; the next append has its own", async () => {
      fake.script(drop, json(200, { version: 1, length: 1 }), json(200, { version: 2, length: 2 }), json(200, { value: 1, version: 1 }));
      const scope = runScope();
      assert.deepEqual(await scope.append("log", [1]), { version: 1, length: 1 });
      await scope.append("log", [2]);
      await scope.getVersioned("log");
      const [lost, retry, next, read] = fake.seen;
      assert.ok(lost?.key && /^[A-Za-z0-9._:-]{1,200}$/.test(lost.key), String(lost?.key));
      assert.equal(retry?.key, lost.key);
      assert.ok(next?.key && next.key !== lost.key);
      assert.equal(read?.key, undefined);
    });

    it("a write whose connection keeps dropping is Unavailable after its retries", async () => {
      fake.script(drop, drop, drop);
      const error = await thrown(new Client(url, { key: "k", retries: 2 }).runs.cancel("run_1"));
      assert.ok(error instanceof Unavailable, String(error));
      assert.match(error.message, /cannot reach keepstate/);
      assert.equal(fake.seen.length, 3);
      assert.equal(new Set(fake.seen.map((seen) => seen.key)).size, 1);
    });

    it("a call that gets no answer within its timeout is Unavailable; a GET is repeated first", async () => {
      fake.script(hang, hang);
      const started = Date.now();
      const error = await thrown(new Client(url, { key: "k", timeout: 0.3, retries: 1 }).runs.get("run_1"));
      assert.ok(error instanceof Unavailable);
      assert.match(error.message, /no answer within 0.3 s/);
      assert.equal(fake.seen.length, 2);
      assert.ok(Date.now() - started < 5_000);
      fake.script(hang);
      assert.ok((await thrown(new Client(url, { key: "k", timeout: 0.3 }).sessions.create({ user: "u" }))) instanceof Unavailable);
      assert.equal(fake.seen.length, 1);
    });

    it("a long poll gets its wait on top of the timeout", async () => {
      fake.script((_, response) => void setTimeout(() => json(200, { id: "run_1", status: "done" })(_, response), 600));
      const run = await new Client(url, { key: "k", timeout: 0.3 }).runs.wait("run_1", { timeout: 1 });
      assert.equal(run.status, "done");
      assert.equal(fake.seen[0]?.url, "/v0/runs/run_1?wait=1");
    });
  });

  describe("never sent", () => {
    it("a refused connection is retried even for an unguarded write, until the server listens", async () => {
      const port = await freePort();
      const late = new Scripted();
      const listening = sleepMs(120).then(() => late.listen(port));
      try {
        const appended = await new ScopeClass(
          new Sender(buildConfig(`http://127.0.0.1:${port}`, { retries: 6 })), runTokenTarget("run", "tok"),
        ).append("log", [1]).catch((error: unknown) => error);
        await listening;
        assert.ok(!(appended instanceof Error), String(appended));
        assert.equal(late.seen.length, 1, "sent exactly once");
        assert.equal(late.seen[0]?.url, "/v0/state/run/log/append");
      } finally {
        await listening;
        await late.close();
      }
    });
  });

  describe("the wire", () => {
    it("sends the key, a run token, JSON bodies with the spec's field names", async () => {
      fake.script(json(200, { version: 3 }), json(200, { id: "run_2", status: "queued" }));
      await runScope().put("k", { a: 1 }, { ifVersion: 2, ttlSeconds: 60 });
      await client().runs.start("chat", { m: 1 }, { sessionId: "s1", idempotencyKey: "i", queueTimeout: 5 });
      assert.deepEqual(fake.seen.map((seen) => [seen.method, seen.url, JSON.parse(seen.body)]), [
        ["PUT", "/v0/state/run/k", { value: { a: 1 }, if_version: 2, ttl_seconds: 60 }],
        ["POST", "/v0/runs", { agent: "chat", input: { m: 1 }, session_id: "s1", idempotency_key: "i", queue_timeout: 5 }],
      ]);
    });

    it("percent-encodes path segments and keeps `.` and `..` keys as keys", async () => {
      const admin = client();
      fake.script(...Array.from({ length: 5 }, () => json(200, { value: 1, version: 1 })));
      await admin.state.session("s/1", "chat").get(".");
      await admin.state.session("s 1", "chat").get("..");
      await admin.state.user("u1", "chat").get("...");
      await admin.state.run("run_1").get("a:b");
      await runScope().get(".");
      assert.deepEqual(fake.seen.map((seen) => seen.url), [
        "/v0/sessions/s%2F1/state/chat/%2E", "/v0/sessions/s%201/state/chat/%2E%2E",
        "/v0/users/u1/state/chat/%2E%2E%2E", "/v0/runs/run_1/state/a%3Ab", "/v0/state/run/%2E",
      ]);
    });

    it("lists caller state under its prefix, following next", async () => {
      fake.script(json(200, { keys: [{ key: "a", version: 1 }], next: "a" }), json(200, { keys: [{ key: "b", version: 2 }], next: null }));
      const keys = [];
      for await (const item of client().state.agent("chat").keys({ prefix: "" })) keys.push(item);
      assert.deepEqual(keys, [{ key: "a", version: 1 }, { key: "b", version: 2 }]);
      assert.deepEqual(fake.seen.map((seen) => seen.url), ["/v0/agents/chat/state/?limit=100", "/v0/agents/chat/state/?after=a&limit=100"]);
    });

    it("an unknown error code is a plain KeepstateError with that code; a body that is not JSON too", async () => {
      fake.script(json(418, { error: "teapot", message: "short and stout", spout_size: 3 }), json(500, "oops"));
      const teapot = await thrown(client().keys.list());
      assert.ok(teapot instanceof KeepstateError);
      assert.equal(teapot.constructor, KeepstateError);
      assert.deepEqual([teapot.code, teapot.status, teapot.message, teapot.details], ["teapot", 418, "short and stout", { spoutSize: 3 }]);
      const oops = await thrown(client().keys.list());
      assert.ok(oops instanceof KeepstateError);
      assert.deepEqual([oops.code, oops.status, oops.message], ["internal", 500, "HTTP 500: oops"]);
    });

    it("a batch conflict lists every failed op, camelCase", async () => {
      fake.script(json(409, {
        error: "version_conflict", message: "batch conflict",
        conflicts: [{ index: 1, scope: "session", key: "k", current_version: 4 }],
      }));
      const { InvocationState } = await import("../dist/invocation.js");
      const state = new InvocationState(new Sender(buildConfig(url, {})), "tok");
      const error = await thrown(state.batch().put("run", "a", 1).put("session", "k", 2, { ifVersion: 3 }).commit());
      assert.ok(error instanceof VersionConflict);
      assert.deepEqual(error.conflicts, [{ index: 1, scope: "session", key: "k", currentVersion: 4 }]);
      assert.deepEqual(JSON.parse(fake.seen[0]?.body ?? ""), {
        ops: [{ op: "put", scope: "run", key: "a", value: 1 }, { op: "put", scope: "session", key: "k", value: 2, if_version: 3 }],
      });
    });
  });

  describe("which calls are safe to repeat", () => {
    const claim: Claim = {
      id: "inv_1", runId: "run_1", agent: "a", kind: "start", input: null, decision: null,
      sessionId: null, user: null, parentId: null, token: "tok", leaseSeconds: 30,
    };
    const target = callerTarget("/v0/agents/a/state/");

    it("matches the Python SDK's rules: a key on each write the API makes idempotent, reads safe by nature", async () => {
      const { append, get, incr, keysPage, patch, pop, put, remove, tail, trim } = await import("../dist/state-calls.js");
      const { InvocationState } = await import("../dist/invocation.js");
      const table: [string, Call<unknown>][] = [
        ["claim", calls.claim(["a"], 1)],
        ["heartbeat", calls.heartbeat(claim)],
        ["complete", calls.complete(claim, "null")],
        ["fail", calls.fail(claim, "E", "m")],
        ["hold", calls.hold(claim, "null")],
        ["emit", calls.emit(claim, [{ data: 1 }])],
        ["child run", calls.startRun("a", null, {}, "tok")],
        ["run", calls.startRun("a", null, {})],
        ["decide", calls.decide("r", { approved: true })],
        ["cancel", calls.cancelRun("r")],
        ["get", get(target, "k")],
        ["keys", keysPage(target, "", undefined, 100)],
        ["tail", tail(target, "k", 5)],
        ["put", put(target, "k", 1, {})],
        ["put ifVersion", put(target, "k", 1, { ifVersion: 0 })],
        ["delete", remove(target, "k", {})],
        ["append", append(target, "k", [1], {})],
        ["trim ifVersion", trim(target, "k", 1, { ifVersion: 2 })],
        ["pop", pop(target, "k", {})],
        ["incr", incr(target, "k", {})],
        ["patch", patch(target, "k", {}, {})],
        ["session create", calls.createSession({})],
        ["session create with id", calls.createSession({ id: "s" })],
        ["session update", calls.updateSession("s", {})],
        ["revoke key", calls.revokeKey("k")],
      ];
      const how = (call: Call<unknown>) => (call.idempotencyKey !== undefined ? "key" : repeatable(call) ? "safe" : "once");
      assert.deepEqual(Object.fromEntries(table.map(([name, call]) => [name, how(call)])), {
        claim: "once", heartbeat: "safe", complete: "key", fail: "key", hold: "key", emit: "key", "child run": "key",
        run: "key", decide: "key", cancel: "key", get: "safe", keys: "safe", tail: "safe", put: "key",
        "put ifVersion": "key", delete: "key", append: "key", "trim ifVersion": "key", pop: "key", incr: "key",
        patch: "key", "session create": "once", "session create with id": "safe", "session update": "once",
        "revoke key": "once",
      });
      const keys = table.map(([, call]) => call.idempotencyKey).filter((key) => key !== undefined);
      assert.equal(new Set(keys).size, keys.length, "each call its own key");
      assert.ok(keys.every((key) => /^[A-Za-z0-9._:-]{1,200}$/.test(key)));
      fake.script(json(200, { results: [{ version: 1 }] }), json(200, { results: [{ version: 2 }] }));
      const state = new InvocationState(new Sender(buildConfig(url, {})), "tok");
      await state.batch().put("run", "a", 1).commit();
      await state.batch().put("run", "a", 1).commit();
      assert.ok(fake.seen[0]?.key && fake.seen[1]?.key && fake.seen[0].key !== fake.seen[1].key, "a batch has its key");
    });
  });
});
