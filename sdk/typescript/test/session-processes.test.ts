/**
 * Seed 003's test, in Node: runtime instances in processes of their own share their sessions
 * through keepstate's `SessionStore` — behind one server on SQLite, and behind two servers on one
 * PostgreSQL (each instance talking to its own server). Concurrent confirmations of one pending
 * selection book it exactly once; an instance paused (SIGSTOP) past its lease cannot write; a killed
 * one leaves its lease to expire. Every overlap is made by construction (an instance is held inside
 * its transaction until told to go on); deadlines only bound a hang.
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { SessionStore } from "keepstate";
import { freshState, type SessionStateV2 } from "./support/agento.js";
import { freshSchema, skipWithoutPostgres } from "./support/postgres.js";
import { exited, type Server, startServer, terminate } from "./support/server.js";

const RUNTIME = fileURLToPath(new URL("./support/session-runtime.js", import.meta.url));
const LEASE_MS = 1000;
const ANSWER_WITHIN_MS = 90_000;

/** A runtime instance in its own process, driven line by line. */
class Instance {
  private readonly answers: Record<string, unknown>[] = [];
  private wake: () => void = () => undefined;

  private constructor(readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      this.answers.push(JSON.parse(line) as Record<string, unknown>);
      this.wake();
    });
  }

  static async start(url: string, key: string, space: string, ledger: string): Promise<Instance> {
    const env = { ...process.env, KEEPSTATE_URL: url, KEEPSTATE_KEY: key, SPACE: space, LEDGER: ledger,
      LEASE_MS: String(LEASE_MS) };
    const instance = new Instance(spawn(process.execPath, [RUNTIME], { env, stdio: ["pipe", "pipe", "inherit"] }));
    await instance.next((answer) => answer["ready"] === true);
    return instance;
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  send(line: string): void {
    this.child.stdin!.write(`${line}\n`);
  }

  /** The first answer (from now on, or already in) that `matches`, taken out of the queue. */
  async next(matches: (answer: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
    const deadline = Date.now() + ANSWER_WITHIN_MS;
    for (;;) {
      const found = this.answers.findIndex(matches);
      if (found >= 0) return this.answers.splice(found, 1)[0]!;
      assert.ok(Date.now() < deadline && this.child.exitCode === null, `instance ${this.pid} never answered`);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 1000);
      });
    }
  }

  done(command: string, sid?: string): Promise<Record<string, unknown>> {
    return this.next((answer) => answer["done"] === command && (sid === undefined || answer["sid"] === sid));
  }

  async inside(sid: string): Promise<void> {
    await this.next((answer) => answer["inside"] === sid);
  }

  signal(name: NodeJS.Signals): void {
    this.child.kill(name);
  }
}

interface Setup {
  /** The servers: instance A talks to the first, instance B to the last. */
  servers: Server[];
  close(): Promise<void>;
}

async function oneSqliteServer(): Promise<Setup> {
  const server = await startServer();
  return { servers: [server], close: () => server.stop() };
}

async function twoServersOnPostgres(): Promise<Setup> {
  const schema = freshSchema();
  const first = await startServer({ store: schema.url });
  const second = await startServer({ store: schema.url, adminKey: first.adminKey });
  return {
    servers: [first, second],
    close: async () => {
      await Promise.all([first.stop(), second.stop()]);
      schema.drop();
    },
  };
}

const SETUPS = [
  { name: "one server on SQLite", open: oneSqliteServer, skip: async (): Promise<string | false> => false },
  { name: "two servers on one PostgreSQL", open: twoServersOnPostgres, skip: skipWithoutPostgres },
];

for (const setup of SETUPS) {
  describe(`runtime instances in two processes, ${setup.name}`, async () => {
    const skip = await setup.skip();
    let opened: Setup;
    let store: SessionStore<SessionStateV2>;
    let a: Instance;
    let b: Instance;
    const folder = mkdtempSync(join(tmpdir(), "keepstate-ts-sessions-"));
    const ledger = join(folder, "ledger.jsonl");
    const bookings = () => readFileSync(ledger, { encoding: "utf8", flag: "a+" }).split("\n").filter(Boolean)
      .map((line) => JSON.parse(line) as { item: string; pid: number });

    before(async () => {
      if (skip) return;
      opened = await setup.open();
      const [first, last] = [opened.servers[0]!, opened.servers.at(-1)!];
      const key = await first.makeKey("member");
      store = new SessionStore(first.url, { key, space: "booking" });
      a = await Instance.start(first.url, key, "booking", ledger);
      b = await Instance.start(last.url, key, "booking", ledger);
    });

    after(async () => {
      if (skip) return;
      await Promise.all([a, b].filter(Boolean).map((instance) => terminate(instance.child, 5_000)));
      await opened.close();
      rmSync(folder, { recursive: true, force: true });
    });

    it("concurrent confirmations of one pending selection book it exactly once", { skip }, async () => {
      const sids = ["trial-0", "trial-1", "trial-2", "trial-3"];
      for (const sid of sids) await store.set(sid, freshState({ item: `seat-${sid}` }));
      a.send(`confirm 6 ${sids.join(" ")}`);
      b.send(`confirm 6 ${sids.join(" ")}`);
      const counts = await Promise.all([a.done("confirm"), b.done("confirm")]);
      assert.deepEqual(counts.map((count) => count["errors"]), [[], []]);
      assert.equal(counts.reduce((sum, count) => sum + (count["booked"] as number), 0), sids.length);
      assert.equal(counts.reduce((sum, count) => sum + (count["nothing"] as number), 0), sids.length * 11);
      assert.deepEqual(bookings().map((booking) => booking.item).sort(), sids.map((sid) => `seat-${sid}`));
      for (const sid of sids) {
        const session = await store.get(sid);
        assert.equal(session?.pendingConfirmation, null);
        assert.equal(session?.bookings.length, 1, "exactly one write");
      }
    });

    it("a confirmation waits for the instance inside the transaction, then finds nothing to do", { skip }, async () => {
      await store.set("overlap", freshState({ item: "seat-overlap" }));
      const before = bookings().length;
      a.send("hold overlap");
      await a.inside("overlap"); // A holds the session; its state still has the pending selection
      b.send("confirm 1 overlap"); // B can only book it by getting in while A is inside
      a.send("continue overlap"); // A writes a state without the pending selection and leaves
      assert.equal((await a.done("hold", "overlap"))["outcome"], "wrote");
      const confirmed = await b.done("confirm");
      assert.deepEqual([confirmed["booked"], confirmed["nothing"], confirmed["errors"]], [0, 1, []]);
      assert.equal(bookings().length, before);
      assert.deepEqual((await store.get("overlap"))?.state, { by: `hold-${a.pid}` });
    });

    it("an instance paused past its lease cannot write", { skip }, async () => {
      await store.set("paused", freshState(null));
      a.send("hold paused");
      await a.inside("paused");
      a.signal("SIGSTOP"); // no renewal from now on: its lease runs out while B waits for it
      try {
        b.send("try paused 30000");
        assert.equal((await b.done("try", "paused"))["outcome"], "wrote");
      } finally {
        a.signal("SIGCONT");
      }
      a.send("continue paused");
      assert.equal((await a.done("hold", "paused"))["outcome"], "lease_lost");
      assert.deepEqual((await store.get("paused"))?.state, { by: `try-${b.pid}` }); // the late write never landed
    });

    it("a killed instance leaves its lease to expire", { skip }, async () => {
      a.send("hold killed");
      await a.inside("killed");
      b.send("try killed 0");
      assert.equal((await b.done("try", "killed"))["outcome"], "session_locked"); // held while A lives
      a.signal("SIGKILL");
      await exited(a.child);
      b.send("try killed 30000");
      assert.equal((await b.done("try", "killed"))["outcome"], "wrote"); // granted once A's lease expired
      assert.deepEqual((await store.get("killed"))?.state, { by: `try-${b.pid}` });
    });
  });
}
