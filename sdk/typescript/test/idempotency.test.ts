/**
 * Writes whose answer was lost land once: the SDK against a real `keepstate serve` on SQLite and on
 * PostgreSQL, through `LosingProxy`, which forwards a chosen request to the server, lets it apply the
 * write, and drops the SDK's connection before the answer reaches it. The SDK retries with the same
 * `Idempotency-Key` and the server answers the repeat as it answered the first, writing nothing. State
 * is read back straight from the server, not through the proxy. Which request is lost is chosen by its
 * route, never by timing.
 */

import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import { Client, IdempotencyMismatch, InvalidKey, type Invocation, type Scope, Worker } from "keepstate";
import { freshSchema, skipWithoutPostgres } from "./support/postgres.js";
import { LosingProxy } from "./support/proxy.js";
import { agentName, collect, type Server, startServer } from "./support/server.js";

interface Setup {
  server: Server;
  close(): Promise<void>;
}

const SETUPS = [
  {
    name: "SQLite",
    skip: async (): Promise<string | false> => false,
    open: async (): Promise<Setup> => {
      const server = await startServer();
      return { server, close: () => server.stop() };
    },
  },
  {
    name: "PostgreSQL",
    skip: skipWithoutPostgres,
    open: async (): Promise<Setup> => {
      const schema = freshSchema();
      const server = await startServer({ store: schema.url });
      return { server, close: async () => (await server.stop(), schema.drop()) };
    },
  },
];

/** A write on a caller's agent-scope state: what to prepare (straight), the call, the route whose
 * answer is lost, what the call answers and what is read back straight afterwards. */
interface Case {
  prepare?: (scope: Scope) => Promise<unknown>;
  call: (scope: Scope) => Promise<unknown>;
  lost: [string, string];
  answers: unknown;
  check: (scope: Scope) => Promise<unknown>;
  found: unknown;
}

const CASES: Record<string, Case> = {
  append: {
    call: async (scope) => (await scope.append("log", ["a"])).length,
    lost: ["POST", "/log/append"], answers: 1,
    check: async (scope) => (await scope.tail("log", 10)).items, found: ["a"],
  },
  incr: {
    call: async (scope) => (await scope.incr("n", { by: 5 })).value,
    lost: ["POST", "/n/incr"], answers: 5,
    check: (scope) => scope.get("n"), found: 5,
  },
  pop: {
    prepare: (scope) => scope.append("q", [1, 2, 3]),
    call: async (scope) => (await scope.pop("q"))?.item,
    lost: ["POST", "/q/pop"], answers: 3,
    check: async (scope) => (await scope.tail("q", 10)).items, found: [1, 2],
  },
  put: {
    call: (scope) => scope.put("k", { v: 1 }),
    lost: ["PUT", "/state/k"], answers: 1,
    check: (scope) => scope.getVersioned("k"), found: { value: { v: 1 }, version: 1 },
  },
  patch: {
    call: async (scope) => (await scope.patch("doc", { a: 1 })).value,
    lost: ["PATCH", "/state/doc"], answers: { a: 1 },
    check: async (scope) => (await scope.getVersioned("doc")).version, found: 1,
  },
};

for (const setup of SETUPS) {
  describe(`writes whose answer was lost land once, on ${setup.name}`, async () => {
    const skip = await setup.skip();
    let opened: Setup;
    let proxy: LosingProxy;
    let admin: Client;
    let keys: { member: string; worker: string };

    before(async () => {
      if (skip) return;
      opened = await setup.open();
      proxy = await LosingProxy.start(opened.server.url);
      admin = new Client(opened.server.url, { key: opened.server.adminKey });
      keys = { member: await opened.server.makeKey("member"), worker: await opened.server.makeKey("worker") };
    });
    after(async () => {
      if (skip) return;
      await proxy.close();
      await opened.close();
    });
    beforeEach(() => proxy?.reset());

    /** The lost request and its retry: the same key, the first lost, the second answered. */
    function assertRetriedWithOneKey(method: string, pathEnd: string): void {
      const seen = proxy.requests(method, pathEnd);
      assert.equal(seen.length, 2, `${method} …${pathEnd} sent ${seen.length} times`);
      const [first, retry] = seen;
      assert.ok(first?.key && first.key === retry?.key, `keys ${first?.key} and ${retry?.key}`);
      assert.deepEqual([first.lost, retry.lost], [true, false]);
    }

    for (const [name, { prepare, call, lost, answers, check, found }] of Object.entries(CASES)) {
      it(`a caller's ${name}`, { skip }, async () => {
        const agent = agentName();
        await prepare?.(admin.state.agent(agent));
        proxy.lose(...lost);
        const answered = await call(new Client(proxy.url, { key: opened.server.adminKey }).state.agent(agent));
        assertRetriedWithOneKey(...lost);
        assert.deepEqual(answered, answers);
        assert.deepEqual(await check(admin.state.agent(agent)), found);
      });
    }

    it("a retry carries the first attempt's key, each call its own, a read none", { skip }, async () => {
      proxy.lose("POST", "/log/append");
      const scope = new Client(proxy.url, { key: opened.server.adminKey }).state.agent(agentName());
      await scope.append("log", ["a"]);
      await scope.append("log", ["b"]);
      await scope.get("log");
      const [first, retry, other] = proxy.requests("POST", "/log/append");
      assert.ok(first?.key && first.key === retry?.key);
      assert.ok(other?.key && other.key !== first.key);
      assert.deepEqual(proxy.requests("GET", "/state/log").map((seen) => seen.key), [undefined]);
    });

    it("a caller's own idempotencyKey: sent as the key, a repeat answered as the first, a bad one refused", { skip }, async () => {
      const scope = new Client(proxy.url, { key: opened.server.adminKey }).state.agent(agentName());
      const first = await scope.append("outbox", ["mail"], { idempotencyKey: "send-42" });
      const again = await scope.append("outbox", ["mail"], { idempotencyKey: "send-42" });
      assert.deepEqual([first, again], [{ version: 1, length: 1 }, { version: 1, length: 1 }]);
      assert.deepEqual(proxy.requests("POST", "/outbox/append").map((seen) => seen.key), ["send-42", "send-42"]);
      assert.deepEqual((await scope.tail("outbox", 10)).items, ["mail"]);
      assert.throws(() => scope.incr("n", { idempotencyKey: "not a key" }), InvalidKey); // refused before sending
      await assert.rejects(scope.append("outbox", ["other"], { idempotencyKey: "send-42" }), IdempotencyMismatch);
    });

    it("a run started and cancelled with lost answers is one run, cancelled once", { skip }, async () => {
      const direct = new Client(opened.server.url, { key: keys.member });
      const session = await direct.sessions.create({});
      proxy.lose("POST", "/v0/runs");
      proxy.lose("POST", "/cancel");
      const client = new Client(proxy.url, { key: keys.member });
      const run = await client.runs.start(agentName(), { m: 1 }, { sessionId: session.id });
      const cancelled = await client.runs.cancel(run.id);
      assertRetriedWithOneKey("POST", "/v0/runs");
      assertRetriedWithOneKey("POST", "/cancel");
      assert.equal(cancelled.status, "cancelled");
      assert.deepEqual((await collect(direct.runs.list({ sessionId: session.id }))).map((found) => found.id), [run.id]);
      const statuses = (await direct.runs.events(run.id)).events.filter((e) => e.type === "run.status").map((e) => e.data.status);
      assert.equal(statuses.filter((status) => status === "cancelled").length, 1, String(statuses));
    });

    it("a worker's emit, batch and completion with lost answers land once", { skip }, async () => {
      const agent = agentName();
      const answers: { seq?: number; batch?: unknown } = {};
      const warnings: string[] = [];
      const worker = new Worker(proxy.url, { key: keys.worker, claimWait: 1, logger: { warn: (line) => warnings.push(line) } });
      worker.agent(agent, async (inv: Invocation) => {
        answers.seq = await inv.emit("hello");
        answers.batch = await inv.state.batch().append("run", "log", ["x"]).incr("run", "n", { by: 2 }).commit();
        return { ok: true };
      });
      const routes: [string, string][] = [["POST", "/events"], ["POST", "/v0/state/batch"], ["POST", "/complete"]];
      for (const route of routes) proxy.lose(...route);
      const direct = new Client(opened.server.url, { key: keys.member });
      const run = await direct.runs.start(agent);
      assert.equal(await worker.run({ stopAfter: 1 }), 1);
      for (const route of routes) assertRetriedWithOneKey(...route);
      assert.deepEqual(warnings.filter((line) => line.includes("could not report")), []);
      const done = await direct.runs.wait(run.id, { timeout: 60 });
      assert.deepEqual([done.status, done.output], ["done", { ok: true }]);
      const events = (await direct.runs.events(run.id)).events;
      assert.deepEqual(events.filter((e) => !e.type.startsWith("run.")).map((e) => [e.type, e.data]), [["message", "hello"]]);
      assert.equal(answers.seq, events.find((e) => e.type === "message")?.seq);
      assert.deepEqual(answers.batch, [{ version: 1, length: 1 }, { value: 2, version: 1 }]);
      const state = direct.state.run(run.id);
      assert.deepEqual([(await state.tail("log", 10)).items, await state.get("n")], [["x"], 2]);
    });
  });
}
