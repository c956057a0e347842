/**
 * Run events end to end against real `keepstate serve` processes: a worker emits, a caller streams.
 *
 * Every overlap is made, not hoped for (as in the Python SDK's `test_sdk_events.py`): an agent emits
 * part of its events, then waits on a gate the test opens only once the stream has yielded them, so
 * the stream is live when the rest come; the server is killed only after the stream yielded the first
 * part, and the rest is emitted only once a server runs again on the same store and port. No
 * assertion is about how long anything took.
 */

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Client, type Invocation, InvalidRequest, KeepstateError, NotFound, type RunEvent, TooLarge, Worker,
} from "keepstate";
import { runExample } from "./support/examples.js";
import { agentName, collect, exited, REPO_ROOT, type Server, startServer } from "./support/server.js";

/** No heartbeat comes within a test: a cancel can only reach the agent through an emit's answer. */
const LONG_LEASE = 3600;

/** A promise opened from outside. */
function gate(): { open(): void; opened: Promise<void> } {
  let open = (): void => undefined;
  const opened = new Promise<void>((done) => (open = done));
  return { open, opened };
}

/** The events a worker emitted (not the platform's `run.*`), as [type, data]. */
const mine = (events: RunEvent[]): [string, unknown][] =>
  events.filter((e) => !e.type.startsWith("run.")).map((e) => [e.type, e.data]);

/** Each seq once, from 1, none missing; the run's output, then its final status, last. */
function assertWholeLog(events: RunEvent[], output: unknown, status = "done"): void {
  assert.deepEqual(events.map((e) => e.seq), events.map((_, index) => index + 1));
  const ending = events.slice(-2).map((e) => [e.type, e.data]);
  assert.deepEqual(ending, [["run.output", { output }], ["run.status", { status }]]);
  assert.ok(events.every((e) => typeof e.at === "number"));
}

describe("run events", () => {
  let server: Server;
  let client: Client;
  let workerKey: string;
  /** What the workers warned about (an agent's throw), kept out of the test's output. */
  const warnings: string[] = [];

  before(async () => {
    server = await startServer({ lease: LONG_LEASE });
    client = new Client(server.url, { key: await server.makeKey("member") });
    workerKey = await server.makeKey("worker");
  });
  after(() => server.stop());

  /** Start a run of a fresh agent served by `fn` once; the run's id and the worker's end. */
  async function serveOnce(fn: (inv: Invocation) => unknown): Promise<{ runId: string; served: Promise<number> }> {
    const agent = agentName("events");
    const logger = { warn: (message: string) => void warnings.push(message) };
    const worker = new Worker(server.url, { key: workerKey, claimWait: 1, logger }).agent(agent, fn);
    const run = await client.runs.start(agent);
    return { runId: run.id, served: worker.run({ stopAfter: 1 }) };
  }

  it("a caller streams a worker's events live, in order, and the stream ends with the run", async () => {
    const halfway = gate();
    const seqs: number[] = [];
    const { runId, served } = await serveOnce(async (inv) => {
      seqs.push(await inv.emit("Hel", { type: "token" }));
      seqs.push(await inv.emitMany([{ type: "token", data: "lo" }, { type: "token", data: " wor" }]));
      await halfway.opened;
      seqs.push(await inv.emitMany([{ type: "token", data: "ld" }, { data: { done: true } }]));
      return "Hello world";
    });
    const events: RunEvent[] = [];
    for await (const event of client.runs.stream(runId)) {
      events.push(event);
      if (mine(events).length === 3) halfway.open(); // only now does the agent write the rest
    }
    await served;
    assert.deepEqual(mine(events), [["token", "Hel"], ["token", "lo"], ["token", " wor"], ["token", "ld"], ["message", { done: true }]]);
    assertWholeLog(events, "Hello world");
    const seqOf = (data: string) => events.find((e) => e.data === data)?.seq;
    assert.deepEqual(seqs, [seqOf("Hel"), seqOf(" wor"), (seqOf("ld") ?? 0) + 1]);
  });

  it("reads from after a seq, as a stream and as pages; another member's run is NotFound", async () => {
    const { runId, served } = await serveOnce((inv) => inv.emitMany(Array.from({ length: 10 }, (_, n) => ({ type: "n", data: n }))));
    await served;
    const whole = await collect(client.runs.stream(runId));
    assertWholeLog(whole, whole.at(-3)?.seq);
    assert.deepEqual(await collect(client.runs.stream(runId, { after: 4 })), whole.slice(4));
    assert.deepEqual(await collect(client.runs.stream(runId, { after: whole.at(-1)?.seq })), []);
    const paged: RunEvent[] = [];
    for (let after = 0; ;) {
      const page = await client.runs.events(runId, { after, limit: 4 });
      assert.ok(page.events.length <= 4);
      paged.push(...page.events);
      if (page.next === null) break;
      after = page.next;
    }
    assert.deepEqual(paged, whole);
    assert.deepEqual((await client.runs.events(runId, { after: 3, limit: 2 })).events, whole.slice(3, 5));
    const other = new Client(server.url, { key: await server.makeKey("member") });
    await assert.rejects(other.runs.events(runId), NotFound);
    await assert.rejects(collect(other.runs.stream(runId)), NotFound);
  });

  it("an emit's answer brings a cancel to the agent", async () => {
    const cancelled = gate();
    const seen: boolean[] = [];
    const { runId, served } = await serveOnce(async (inv) => {
      await inv.emit("started");
      seen.push(inv.cancelRequested);
      await cancelled.opened;
      await inv.emit("still here");
      seen.push(inv.cancelRequested);
      if (inv.cancelRequested) throw new Error("stopped: cancelled");
      return "never cancelled";
    });
    const events = [];
    for await (const event of client.runs.stream(runId)) {
      events.push(event);
      if (event.data === "started") {
        await client.runs.cancel(runId);
        cancelled.open();
      }
    }
    await served;
    assert.deepEqual(seen, [false, true]);
    assert.deepEqual(events.at(-1)?.data, { status: "cancelled" });
    assert.match(warnings.join("\n"), /stopped: cancelled/);
  });

  it("the chat screen of docs/typescript.md runs as written", async () => {
    const page = readFileSync(resolve(REPO_ROOT, "docs/typescript.md"), "utf8");
    const block = /## Run events[^]*?```ts\n([^]*?)```/.exec(page)?.[1];
    assert.ok(block, "docs/typescript.md has a ```ts block under ## Run events");
    const env = { WORKER_KEY: workerKey, KEEPSTATE_KEY: await server.makeKey("member") };
    const printed = await runExample(block, server.url, env);
    assert.deepEqual(printed, ["queued", "running", "done", "you said 'hi' "]);
  });

  it("refused emits throw the SDK's errors and write nothing", async () => {
    const refused: Record<string, unknown> = {};
    const { runId, served } = await serveOnce(async (inv) => {
      const attempts: Record<string, () => Promise<number>> = {
        "101 events": () => inv.emitMany(Array.from({ length: 101 }, (_, n) => ({ data: n }))),
        "a bad type": () => inv.emit("x", { type: "Not A Type" }),
        "a platform type": () => inv.emit("x", { type: "run.status" }),
        "data over 64 KiB": () => inv.emit("x".repeat(64 * 1024 + 1)),
      };
      for (const [name, attempt] of Object.entries(attempts)) {
        refused[name] = await attempt().then(() => "written", (error: unknown) => error instanceof KeepstateError ? error.constructor : error);
      }
      return inv.emitMany(Array.from({ length: 100 }, (_, n) => ({ data: n })));
    });
    await served;
    assert.deepEqual(refused, {
      "101 events": TooLarge, "a bad type": InvalidRequest, "a platform type": InvalidRequest, "data over 64 KiB": TooLarge,
    });
    const events = await collect(client.runs.stream(runId));
    assert.deepEqual(events.filter((e) => e.type === "message").map((e) => e.data), Array.from({ length: 100 }, (_, n) => n));
    assert.deepEqual(events.at(-1)?.data, { status: "done" });
  });
});

describe("a stream across a server killed and started again", () => {
  const dir = mkdtempSync(join(tmpdir(), "keepstate-ts-events-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("reconnects by itself with Last-Event-ID and yields the rest, every seq once", async () => {
    const store = `sqlite:///${join(dir, "server.db")}`;
    const first = await startServer({ store, lease: LONG_LEASE });
    const port = Number(new URL(first.url).port);
    const client = new Client(first.url, { key: await first.makeKey("member") });
    const agent = agentName("restart");
    const firstPart = gate();
    const restarted = gate();
    const worker = new Worker(first.url, { key: await first.makeKey("worker"), claimWait: 1 });
    worker.agent(agent, async (inv) => {
      await inv.emitMany(["a", "b", "c"].map((data) => ({ type: "token", data })));
      await restarted.opened;
      await inv.emitMany(["d", "e"].map((data) => ({ type: "token", data })));
      await inv.emit("f", { type: "token" });
      return "abcdef";
    });
    const run = await client.runs.start(agent);
    const served = worker.run({ stopAfter: 1 });
    const events: RunEvent[] = [];
    const reading = (async () => {
      for await (const event of client.runs.stream(run.id)) {
        events.push(event);
        if (event.data === "c") firstPart.open();
      }
    })();
    reading.catch(() => firstPart.open());
    await firstPart.opened;
    const gone = exited(first.process);
    first.process.kill("SIGKILL"); // no goodbye: the stream's connection just drops
    await gone;
    const second = await startServer({ store, lease: LONG_LEASE, port, adminKey: first.adminKey });
    try {
      restarted.open();
      await reading;
      await served;
      assert.equal((await client.runs.get(run.id)).status, "done");
    } finally {
      await second.stop();
      await first.stop();
    }
    assert.deepEqual(events.filter((e) => e.type === "token").map((e) => e.data), ["a", "b", "c", "d", "e", "f"]);
    assertWholeLog(events, "abcdef");
  });
});
