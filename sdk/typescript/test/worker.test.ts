/**
 * The agent side end to end against a real server: the seed's chat agent, hold and resume, child
 * runs, failures, cancel requests, heartbeats past the lease, stopping, fatal keys, the README.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { Client, Forbidden, type Invocation, type Run, SessionBusy, Unauthorized, Worker } from "keepstate";
import { runExample } from "./support/examples.js";
import { seedChatWorker } from "./support/seed-chat.js";
import { agentName, REPO_ROOT, type Server, sleepMs, startServer } from "./support/server.js";

const LEASE = 2;
let server: Server;
let client: Client;
let workerKey: string;

describe("the agent side", () => {
  before(async () => {
    server = await startServer({ lease: LEASE });
    client = new Client(server.url, { key: await server.makeKey("member") });
    workerKey = await server.makeKey("worker");
  });
  after(() => server.stop());

  /** Runs `worker` until the test's body has finished, then stops it and checks it stopped. */
  async function withWorker<T>(worker: Worker, body: () => Promise<T>): Promise<T> {
    const running = worker.run();
    try {
      return await body();
    } finally {
      await worker.stop();
      await running;
    }
  }

  /** What the workers of these tests warned about (an agent's throw, a lost lease). */
  const warnings: string[] = [];
  const logger = { warn: (message: string) => void warnings.push(message) };

  function newWorker(agents: Record<string, (inv: Invocation) => unknown>): Worker {
    return new Worker(server.url, { key: workerKey, claimWait: 0.5, logger }).register(agents);
  }

  async function turn(agent: string, input: unknown, sessionId?: string): Promise<Run> {
    const run = await client.runs.start(agent, input, { sessionId });
    return client.runs.wait(run.id, { timeout: 30 });
  }

  async function waitForStatus(runId: string, status: string): Promise<Run> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const run = await client.runs.get(runId);
      if (run.status === status || Date.now() > deadline) return run;
      await sleepMs(50);
    }
  }

  describe("the seed's chat agent", () => {
    it("answers three turns of one session with the turn number and the visits", async () => {
      const session = await client.sessions.create({ user: "cust-123" });
      const runs = await withWorker(seedChatWorker(server.url, workerKey), async () => [
        await turn("chat", { message: "hi" }, session.id),
        await turn("chat", { message: "how are you" }, session.id),
        await turn("chat", { message: "bye" }, session.id),
      ]);
      assert.deepEqual(runs.map((run) => run.status), ["done", "done", "done"]);
      assert.deepEqual(runs.map((run) => run.output), [
        { reply: "turn 1: you said 'hi'", visits: 1 },
        { reply: "turn 2: you said 'how are you'", visits: 2 },
        { reply: "turn 3: you said 'bye'", visits: 3 },
      ]);
      assert.equal(runs[0]?.user, "cust-123");
      assert.equal(runs[0]?.sessionId, session.id);
    });
  });

  describe("hold and resume", () => {
    it("holds with a request, resumes with the decision and keeps progress in the run scope", async () => {
      const agent = agentName("approver");
      const worker = newWorker({
        [agent]: async (inv) => {
          if (inv.kind === "start") {
            await inv.state.run.put("progress", { step: 1, input: inv.input });
            inv.hold({ question: "ship it?" });
          }
          return { kind: inv.kind, decision: inv.decision, progress: await inv.state.run.get("progress") };
        },
      });
      await withWorker(worker, async () => {
        const held = await turn(agent, { order: "A-1" });
        assert.equal(held.status, "held");
        assert.deepEqual(held.hold, { question: "ship it?" });
        const before = Date.now();
        const queued = await client.runs.decide(held.id, { approved: true, data: { note: "ok" } });
        const after = Date.now();
        assert.equal(queued.status, "queued");
        const done = await client.runs.wait(held.id, { timeout: 30 });
        assert.equal(done.status, "done");
        // the decision as given, with who made it (the unnamed member key: its id) and when
        const { by, at, ...given } = queued.decision ?? { approved: false, data: null };
        assert.deepEqual(given, { approved: true, data: { note: "ok" } });
        assert.match(String(by), /^key_/);
        assert.ok(typeof at === "number" && at >= before - 1000 && at <= after + 1000);
        assert.deepEqual(done.output, {
          kind: "resume", decision: queued.decision, progress: { step: 1, input: { order: "A-1" } },
        });
      });
    });

    it("a held turn does not block its session: a newer turn runs meanwhile", async () => {
      const agent = agentName("holder");
      const worker = newWorker({ [agent]: (inv) => (inv.input === "wait" ? inv.hold("later") : "ran") });
      const session = await client.sessions.create();
      await withWorker(worker, async () => {
        assert.equal((await turn(agent, "wait", session.id)).status, "held");
        assert.equal((await turn(agent, "go", session.id)).output, "ran");
      });
    });
  });

  describe("child runs", () => {
    it("startRun makes a child: its parentId is the run, its user the parent's", async () => {
      const parent = agentName("parent");
      const child = agentName("child");
      const worker = newWorker({
        [parent]: async (inv) => (await inv.startRun(child, { n: 1 })).id,
        [child]: (inv) => ({ parentId: inv.parentId, user: inv.user, input: inv.input, sessionId: inv.sessionId }),
      });
      const session = await client.sessions.create({ user: "cust-9" });
      await withWorker(worker, async () => {
        const parentRun = await turn(parent, null, session.id);
        assert.equal(parentRun.status, "done");
        const childRun = await client.runs.wait(parentRun.output as string, { timeout: 30 });
        assert.equal(childRun.parentId, parentRun.id);
        assert.equal(childRun.user, "cust-9");
        assert.deepEqual(childRun.output, { parentId: parentRun.id, user: "cust-9", input: { n: 1 }, sessionId: null });
      });
    });
  });

  describe("session_busy", () => {
    it("refuses a second turn while one is queued, and takes it once that one is cancelled", async () => {
      const session = await client.sessions.create();
      const agent = agentName("nobody-runs-this");
      const first = await client.runs.start(agent, null, { sessionId: session.id });
      const refused = await client.runs.start(agent, null, { sessionId: session.id }).catch((error: unknown) => error);
      assert.ok(refused instanceof SessionBusy, String(refused));
      assert.equal(refused.code, "session_busy");
      assert.equal(refused.status, 409);
      assert.equal((await client.runs.cancel(first.id)).status, "cancelled");
      assert.equal((await client.runs.start(agent, null, { sessionId: session.id })).status, "queued");
    });
  });

  describe("outcomes", () => {
    it("a thrown error fails the run with its name and message", async () => {
      class QuotaExceeded extends Error {
        override name = "QuotaExceeded";
      }
      const agent = agentName("thrower");
      const worker = newWorker({
        [agent]: (inv) => {
          if (inv.input === "range") throw new RangeError("bad input");
          if (inv.input === "custom") throw new QuotaExceeded("no more");
        if (inv.input === "text") throw "plain text";
        if (inv.input === "bare") throw Object.create(null);
          return { broken: Number.NaN };
        },
      });
      await withWorker(worker, async () => {
        const range = await turn(agent, "range");
        assert.equal(range.status, "failed");
        assert.deepEqual(range.error, { type: "RangeError", message: "bad input" });
        assert.deepEqual((await turn(agent, "custom")).error, { type: "QuotaExceeded", message: "no more" });
      assert.deepEqual((await turn(agent, "text")).error, { type: "Error", message: "plain text" });
      assert.deepEqual((await turn(agent, "bare")).error, { type: "Error", message: "[object Object]" });
        const unstorable = await turn(agent, "nan");
        assert.equal(unstorable.status, "failed");
        assert.equal(unstorable.error?.type, "InvalidValue");
        assert.match(unstorable.error?.message ?? "", /NaN/);
        assert.ok(warnings.some((line) => line.includes(`agent ${agent} threw: RangeError: bad input`)), String(warnings));
      });
    });

    it("register() takes every method of a class instance too, with `this` bound", async () => {
      const agent = agentName("greeter");
      class Agents {
        greeting = "hello";
        [agent](inv: Invocation): string {
          return `${this.greeting} ${inv.input}`;
        }
      }
      const worker = new Worker(server.url, { key: workerKey, claimWait: 0.5 });
      worker.register(new Agents() as unknown as Record<string, (inv: Invocation) => unknown>);
      assert.deepEqual(worker.agents, [agent]);
      await withWorker(worker, async () => assert.equal((await turn(agent, "you")).output, "hello you"));
    });
  });

  describe("heartbeats", () => {
    it("keep a run alive past its lease", async () => {
      const agent = agentName("slow");
      const worker = newWorker({ [agent]: async () => (await sleepMs(LEASE * 1600), "slept") });
      await withWorker(worker, async () => {
        const run = await turn(agent, null);
        assert.equal(run.status, "done");
        assert.equal(run.output, "slept");
      });
    });

    it("mirror a cancel request onto inv.cancelRequested", async () => {
      const agent = agentName("cancellable");
      const worker = newWorker({
        [agent]: async (inv) => {
          const deadline = Date.now() + 20_000;
          while (!inv.cancelRequested && Date.now() < deadline) await sleepMs(50);
          return { sawCancel: inv.cancelRequested };
        },
      });
      await withWorker(worker, async () => {
        const run = await client.runs.start(agent, null);
        assert.equal((await waitForStatus(run.id, "running")).status, "running");
        await client.runs.cancel(run.id);
        const finished = await client.runs.wait(run.id, { timeout: 30 });
        // The agent chose to complete once it saw the request (well before its 20 s deadline).
        assert.equal(finished.status, "done");
        assert.deepEqual(finished.output, { sawCancel: true });
        assert.ok((finished.updatedAt ?? 0) - (finished.createdAt ?? 0) < 15_000);
      });
    });
  });

  describe("stopping", () => {
    it("stop() finishes the invocation in flight, and an idle worker at its claim poll", async () => {
      const agent = agentName("finisher");
      const worker = newWorker({ [agent]: async () => (await sleepMs(700), "finished") });
      const running = worker.run();
      const run = await client.runs.start(agent, null);
      assert.equal((await waitForStatus(run.id, "running")).status, "running");
      const started = Date.now();
      await worker.stop();
      assert.equal(await running, 1);
      assert.equal((await client.runs.get(run.id)).output, "finished");
      assert.ok(Date.now() - started < 5_000, "an idle loop ends with its claim poll");
    });

    it("run({ stopAfter }) returns after that many invocations", async () => {
      const agent = agentName("counted");
      const worker = newWorker({ [agent]: (inv) => inv.input });
      const runs = await Promise.all([1, 2, 3].map((n) => client.runs.start(agent, n)));
      assert.equal(await worker.run({ stopAfter: 2, concurrency: 2 }), 2);
      assert.equal(await worker.run({ stopAfter: 1 }), 1);
      const outputs = await Promise.all(runs.map(async (run) => (await client.runs.wait(run.id)).output));
      assert.deepEqual(outputs.sort(), [1, 2, 3]);
    });

    it("a key that may not claim stops run() with Forbidden; a revoked one with Unauthorized", async () => {
      const member = new Worker(server.url, { key: await server.makeKey("member"), claimWait: 1 });
      member.agent(agentName(), () => null);
      await assert.rejects(member.run(), Forbidden);
      const admin = new Client(server.url, { key: server.adminKey });
      const key = await admin.keys.create("worker", { name: "short-lived" });
      await admin.keys.revoke(key.id);
      const revoked = new Worker(server.url, { key: key.key, claimWait: 1 });
      revoked.agent(agentName(), () => null);
      await assert.rejects(revoked.run(), Unauthorized);
    });
  });

  describe("the README's TypeScript example", () => {
    it("runs as written and prints the reply", async () => {
      const readme = readFileSync(resolve(REPO_ROOT, "README.md"), "utf8");
      const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
      assert.ok(block, "README.md has a ```ts block");
      const printed = await runExample(block, server.url, { KEEPSTATE_ADMIN_KEY: server.adminKey });
      assert.deepEqual(printed, [{ reply: "turn 1" }]);
    });
  });
});
