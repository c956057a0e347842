/**
 * Several real processes: two worker processes contending on one key, a worker killed mid-run, and
 * a Python worker and a TypeScript worker taking turns in one session.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, type Run, Worker } from "keepstate";
import { seedChatWorker } from "./support/seed-chat.js";
import {
  agentName, exited, KEEPSTATE_BIN, REPO_ROOT, type Server, sleepMs, startServer, terminate,
} from "./support/server.js";

const LEASE = 1.5;
const WORKER_SCRIPT = fileURLToPath(new URL("./support/worker-process.js", import.meta.url));
let server: Server;
let client: Client;
let workerKey: string;
const children: ChildProcess[] = [];

describe("several processes", () => {
  before(async () => {
    server = await startServer({ lease: LEASE });
    client = new Client(server.url, { key: await server.makeKey("member") });
    workerKey = await server.makeKey("worker");
  });
  after(async () => {
    await Promise.all(children.map((child) => terminate(child, 5_000)));
    await server.stop();
  });

  /** Spawn `command`, resolving once it printed `ready` (or, for a Python worker, at once). */
  async function spawnWorker(command: string, args: string[], options: { cwd?: string; waitReady?: boolean } = {}): Promise<{ child: ChildProcess; output: () => string }> {
    const child = spawn(command, args, {
      cwd: options.cwd, env: { ...process.env, KEEPSTATE_URL: server.url, KEEPSTATE_KEY: workerKey },
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    if (options.waitReady !== false) {
      const deadline = Date.now() + 20_000;
      while (!output.includes("ready") && Date.now() < deadline && child.exitCode === null) await sleepMs(20);
      assert.ok(output.includes("ready"), `worker did not start:\n${output}`);
    }
    return { child, output: () => output };
  }

  const nodeWorker = (mode: string, agent: string) => spawnWorker(process.execPath, [WORKER_SCRIPT, mode, agent]);

  describe("update under contention from two worker processes", () => {
    it("2 × 50 increments of one key end at exactly 100", async () => {
      const agent = agentName("counter");
      const workers = [await nodeWorker("counter", agent), await nodeWorker("counter", agent)];
      const started = await Promise.all([0, 1].map(() => client.runs.start(agent, { times: 50 })));
      const runs = await Promise.all(started.map((run) => client.runs.wait(run.id, { timeout: 60 })));
      assert.deepEqual(runs.map((run) => run.status), ["done", "done"], JSON.stringify(runs.map((run) => run.error)));
      const [a, b] = runs.map((run) => run.output as { calls: number; pid: number; started: number; ended: number });
      assert.ok(a && b);
      assert.notEqual(a.pid, b.pid, "each process ran one of the two runs");
      assert.ok(a.started < b.ended && b.started < a.ended, "the two runs overlapped in time");
      const total = await client.runs.wait((await client.runs.start(agent, "read")).id, { timeout: 30 });
      assert.equal(total.output, 100);
      assert.ok(a.calls + b.calls >= 100);
      for (const { child, output } of workers) {
        assert.equal(await terminate(child), 0, output());
        assert.match(output(), /stopped after \d/);
      }
    });
  });

  describe("a worker killed mid-run", () => {
    it("leaves its run interrupted once the lease runs out", async () => {
      const agent = agentName("sleeper");
      const { child } = await nodeWorker("sleeper", agent);
      const run = await client.runs.start(agent, null);
      let seen: Run = run;
      for (const deadline = Date.now() + 20_000; seen.status !== "running" && Date.now() < deadline;) {
        await sleepMs(50);
        seen = await client.runs.get(run.id);
      }
      assert.equal(seen.status, "running");
      await sleepMs(LEASE * 1000); // heartbeats keep it running past one lease
      assert.equal((await client.runs.get(run.id)).status, "running");
      child.kill("SIGKILL");
      await exited(child);
      const lost = await client.runs.wait(run.id, { timeout: 30 });
      assert.equal(lost.status, "interrupted");
      assert.equal(lost.output, null);
    });
  });

  describe("a Python agent and a TypeScript agent", () => {
    it("share one session's history, taking turns", async () => {
      const session = await client.sessions.create({ user: "cust-42" });
      const turn = async (message: string) => {
        const run = await client.runs.start("chat", { message }, { sessionId: session.id });
        return client.runs.wait(run.id, { timeout: 30 });
      };
      const python = async (message: string) => {
        const worker = await spawnWorker(KEEPSTATE_BIN, ["worker", "sdk_seed_chat:worker", "--poll", "1"], {
          cwd: resolve(REPO_ROOT, "tests/client"), waitReady: false,
        });
        const run = await turn(message);
        assert.equal(await terminate(worker.child), 0, worker.output());
        assert.match(worker.output(), /stopped after 1 invocation/);
        return run;
      };
      const typescript = async (message: string) => {
        const worker = seedChatWorker(server.url, workerKey);
        const [handled, run] = await Promise.all([worker.run({ stopAfter: 1 }), turn(message)]);
        assert.equal(handled, 1);
        return run;
      };
      const runs = [await python("one"), await typescript("two"), await python("three"), await typescript("four")];
      assert.deepEqual(runs.map((run) => run.output), [
        { reply: "turn 1: you said 'one'", visits: 1 },
        { reply: "turn 2: you said 'two'", visits: 2 },
        { reply: "turn 3: you said 'three'", visits: 3 },
        { reply: "turn 4: you said 'four'", visits: 4 },
      ]);
      const reader = new Worker(server.url, { key: workerKey, claimWait: 1 }).agent("chat", (inv) => inv.state.session.get("history"));
      const [, read] = await Promise.all([reader.run({ stopAfter: 1 }), turn("read")]);
      assert.deepEqual(read.output, ["one", "two", "three", "four"].flatMap((message, n) => [
        { role: "user", content: message },
        { role: "assistant", content: `turn ${n + 1}: you said '${message}'` },
      ]));
    });
  });
});
