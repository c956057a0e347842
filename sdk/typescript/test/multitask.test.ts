/**
 * Double-texting against a real server: `client.runs.start(agent, input, { multitask })`. A worker of three
 * concurrent invocations runs enqueued turns one at a time, in start order (each logs its start and end in
 * the session's state); an interrupt cancels the queued turn and stops the running one through its
 * worker's `cancelRequested`; a bad value is `InvalidRequest`.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Client, type Invocation, InvalidRequest, type Multitask, type Run, SessionBusy, Worker } from "keepstate";
import { agentName, type Server, sleepMs, startServer } from "./support/server.js";

const HANG_MS = 60_000;
let server: Server;
let client: Client;
let workerKey: string;

/** Runs `agent` on three concurrent invocations: each logs `["start", n]` and `["end", n]` in session state;
 * one whose input says `untilCancelled` runs until its cancel is requested, then throws. */
function loggingWorker(agent: string): Worker {
  const turn = async (inv: Invocation): Promise<unknown> => {
    const input = inv.input as { n: number; untilCancelled?: boolean };
    await inv.state.session.append("log", [["start", input.n]]);
    if (input.untilCancelled) {
      const deadline = Date.now() + HANG_MS;
      while (!inv.cancelRequested && Date.now() < deadline) await sleepMs(20);
      throw new Error("interrupted by a newer turn");
    }
    await inv.state.session.append("log", [["end", input.n]]);
    return input.n;
  };
  return new Worker(server.url, { key: workerKey, concurrency: 3, claimWait: 0.5, logger: { warn: () => {} } })
    .register({ [agent]: turn });
}

async function eventually(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + HANG_MS;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, "what must happen did not");
    await sleepMs(20);
  }
}

describe("multitask", () => {
  before(async () => {
    server = await startServer({ lease: 2 });
    client = new Client(server.url, { key: await server.makeKey("member") });
    workerKey = await server.makeKey("worker");
  });
  after(() => server.stop());

  it("enqueue runs the turns one at a time in order; interrupt stops the running one", async () => {
    const agent = agentName("mt");
    const session = await client.sessions.create();
    const start = (n: number, multitask?: Multitask, untilCancelled = false): Promise<Run> =>
      client.runs.start(agent, { n, untilCancelled }, { sessionId: session.id, multitask });
    const turns = [await start(0)];
    for (const n of [1, 2, 3]) turns.push(await start(n, "enqueue"));
    await assert.rejects(start(9), SessionBusy);
    await assert.rejects(start(9, "reject"), SessionBusy);
    const worker = loggingWorker(agent);
    const running = worker.run();
    try {
      for (const run of turns) assert.equal((await client.runs.wait(run.id, { timeout: 60 })).status, "done");
      const log = client.state.session(session.id, agent);
      const expected = [0, 1, 2, 3].flatMap((n) => [["start", n], ["end", n]]);
      assert.deepEqual(await log.get("log"), expected);

      const long = await start(4, undefined, true);
      await eventually(async () => (await client.runs.get(long.id)).status === "running");
      const waiting = await start(5, "enqueue");
      const newest = await start(6, "interrupt");
      assert.equal(newest.status, "queued");
      assert.equal((await client.runs.get(waiting.id)).status, "cancelled");
      const ended = [];
      for (const run of [long, waiting, newest]) ended.push((await client.runs.wait(run.id, { timeout: 60 })).status);
      assert.deepEqual(ended, ["cancelled", "cancelled", "done"]);
      assert.deepEqual((await log.get("log")).slice(expected.length), [["start", 4], ["start", 6], ["end", 6]]);
    } finally {
      await worker.stop();
      await running;
    }
  });

  it("a child started in its busy session: refused by default, queued behind the parent with enqueue", async () => {
    const agent = agentName("mt-child");
    const parent = async (inv: Invocation): Promise<unknown> => {
      if ((inv.input as { child?: boolean }).child) return "child done";
      const sessionId = inv.sessionId ?? undefined;
      const refused = await inv.startRun(agent, { child: true }, { sessionId }).then(
        () => null,
        (error: unknown) => (error instanceof SessionBusy ? error.code : String(error)),
      );
      const child = await inv.startRun(agent, { child: true }, { sessionId, multitask: "enqueue" });
      return { refused, child: child.id, childStatus: child.status };
    };
    const worker = new Worker(server.url, { key: workerKey, concurrency: 2, claimWait: 0.5, logger: { warn: () => {} } })
      .register({ [agent]: parent });
    const session = await client.sessions.create();
    const run = await client.runs.start(agent, {}, { sessionId: session.id });
    const running = worker.run();
    try {
      const done = await client.runs.wait(run.id, { timeout: 60 });
      const output = done.output as { refused: string; child: string; childStatus: string };
      assert.equal(done.status, "done");
      assert.deepEqual([output.refused, output.childStatus], ["session_busy", "queued"]);
      const child = await client.runs.wait(output.child, { timeout: 60 });
      assert.deepEqual([child.status, child.output, child.parentId], ["done", "child done", run.id]);
    } finally {
      worker.stop();
      await running;
    }
  });

  it("a bad value is InvalidRequest and starts nothing", async () => {
    const session = await client.sessions.create();
    const bad = "later" as unknown as Multitask;
    const options = { sessionId: session.id, multitask: bad };
    await assert.rejects(client.runs.start(agentName("mt-bad"), null, options), InvalidRequest);
    const listed: Run[] = [];
    for await (const run of client.runs.list({ sessionId: session.id })) listed.push(run);
    assert.deepEqual(listed, []);
  });
});
