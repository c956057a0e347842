/**
 * `SessionStore` against a real server, in one process: the runtime's interface, state round trips,
 * `transact` serialising read-modify-write, fences carried through `AsyncLocalStorage`, a lost lease,
 * waiting, credentials, and a Python worker sharing the same store.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type FetchLike, Forbidden, InvalidRequest, KeepstateError, LeaseLost, SessionLocked, SessionStore, Unauthorized,
} from "keepstate";
import { AgentRuntime, freshState, type SessionStateV2, type SessionStore as AgentoSessionStore } from "./support/agento.js";
import { KEEPSTATE_BIN, type Server, sleepMs, startServer } from "./support/server.js";

let server: Server;
let key: string;
let spaces = 0;

/** A store of a space no other test uses. */
function open(options: { leaseMs?: number; waitMs?: number; fetch?: FetchLike; space?: string } = {}) {
  return new SessionStore<SessionStateV2>(server.url, { key, space: options.space ?? `app-${++spaces}`, ...options });
}

/** A promise with its resolver, to hold an operation open until the test lets it go. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe("SessionStore", () => {
  before(async () => {
    server = await startServer();
    key = await server.makeKey("member");
  });
  after(() => server.stop());

  it("is agento-runtime's SessionStore: the runtime takes it in one line", async () => {
    const runtime = new AgentRuntime({ sessionStore: new SessionStore(server.url, { key, space: "booking" }) });
    const typed: AgentoSessionStore = open(); // the interface, checked by the compiler
    assert.equal(typeof typed.transact, "function");
    await runtime.sessionStore.set("s", freshState({ item: "A1" }));
    assert.equal(await runtime.confirm("s", async (item) => `booked ${item}`), "booked");
    assert.equal(await runtime.confirm("s", async () => assert.fail("booked twice")), "nothing");
    assert.deepEqual((await runtime.sessionStore.get("s"))?.bookings, ["booked A1"]);
  });

  it("keeps any JSON object, also after its expiry, and deletes and touches it", async () => {
    const store = open();
    assert.equal(await store.get("absent"), null);
    const state = { ...freshState(null, -60_000), state: { nested: [1, "é", null, { deep: true }] } };
    await store.set("s1", state);
    assert.deepEqual(await store.get("s1"), state); // expired a minute ago: still there for the runtime to judge
    await store.touch("s1", Date.now() + 60_000);
    await store.touch("absent", Date.now());
    assert.equal(await store.get("absent"), null);
    await store.delete("s1");
    await store.delete("s1");
    assert.equal(await store.get("s1"), null);
    await assert.rejects(store.set("s1", [1, 2] as never), InvalidRequest);
    await assert.rejects(store.set("s1", { n: Number.NaN } as never), (error: KeepstateError) => error.code === "invalid_value");
    await assert.rejects(store.get("a b"), (error: KeepstateError) => error.code === "invalid_key");
  });

  it("serialises read-modify-write in one process", async () => {
    const store = open();
    await store.set("counter", { ...freshState(null), state: { n: 0 } });
    const increment = () => store.transact("counter", async () => {
      const session = (await store.get("counter"))!;
      await sleepMs(3); // awaited work between the read and the write
      session.state["n"] = (session.state["n"] as number) + 1;
      await store.set("counter", session);
      return session.state["n"] as number;
    });
    const results = await Promise.all(Array.from({ length: 15 }, increment));
    assert.deepEqual([...results].sort((x, y) => x - y), Array.from({ length: 15 }, (_, n) => n + 1));
    assert.equal((await store.get("counter"))?.state["n"], 15);
  });

  it("carries the fence on writes inside transact only, and is re-entrant", async () => {
    const bodies: string[] = [];
    const recording: FetchLike = (url, init) => {
      if (init.method === "PUT" || init.method === "DELETE") bodies.push(`${init.method} ${url} ${init.body ?? ""}`);
      return fetch(url, init);
    };
    const store = open({ fetch: recording });
    await store.set("f", freshState(null));
    await store.transact("f", async () => {
      await store.transact("f", () => store.set("f", freshState(null))); // nested: the same lease
      await store.delete("f");
    });
    assert.equal(bodies.length, 3);
    assert.doesNotMatch(bodies[0]!, /fence/);
    const fences = bodies.slice(1).map((body) => /"fence":(\d+)|fence=(\d+)/.exec(body)?.slice(1).find(Boolean));
    assert.ok(fences[0] && fences[0] === fences[1], bodies.join("\n"));
  });

  it("releases the lease when the operation fails, and rejects with its error", async () => {
    const store = open({ waitMs: 0 });
    await assert.rejects(store.transact("r", async () => { throw new RangeError("definite"); }), RangeError);
    assert.equal(await store.transact("r", async () => "free"), "free");
  });

  it("gives up waiting with SessionLocked, and the holder keeps its lease renewed however long it runs", async () => {
    const space = `app-${++spaces}`;
    const holder = open({ space, leaseMs: 1200 });
    const waiter = open({ space, waitMs: 300 });
    const { opened, open: letGo } = gate();
    const inside = gate();
    const holding = holder.transact("held", async () => {
      inside.open();
      await opened;
      await holder.set("held", { ...freshState(null), state: { by: "holder" } });
      return "done";
    });
    await inside.opened;
    await assert.rejects(waiter.transact("held", async () => "never"), (error: unknown) => {
      assert.ok(error instanceof SessionLocked && error.code === "session_locked" && error.status === 409);
      return true;
    });
    const patient = open({ space, waitMs: 30_000 });
    const after = patient.transact("held", async () => (await patient.get("held"))?.state);
    await sleepMs(3000); // two and a half leases: only renewals keep the holder's
    letGo();
    assert.equal(await holding, "done");
    assert.deepEqual(await after, { by: "holder" }); // it got in after the holder, and saw its write
  });

  it("rejects with LeaseLost once another instance holds the session, and refuses the operation's late writes", async () => {
    const space = `app-${++spaces}`;
    const stalled = gate();
    let holderWrites = 0;
    const slowRenewals: FetchLike = async (url, init) => {
      if (url.endsWith("/lease/renew")) await stalled.opened; // renewals cannot get through: the lease runs out
      if (init.method === "PUT") holderWrites++;
      return fetch(url, init);
    };
    const holder = open({ space, leaseMs: 300, fetch: slowRenewals });
    const other = open({ space, waitMs: 30_000 });
    const inside = gate();
    const resume = gate();
    const finished = gate();
    let late: unknown;
    const holding = holder.transact("lost", async () => {
      inside.open();
      await resume.opened;
      late = await holder.set("lost", { ...freshState(null), state: { by: "late" } }).catch((error: unknown) => error);
      finished.open();
      return "returned";
    });
    await inside.opened;
    await other.transact("lost", () => other.set("lost", { ...freshState(null), state: { by: "other" } }));
    stalled.open(); // the holder's renewal now reaches the server, which refuses it
    await assert.rejects(holding, LeaseLost);
    resume.open();
    await finished.opened;
    assert.ok(late instanceof LeaseLost, String(late));
    assert.equal(holderWrites, 0, "the late write was refused before it was sent");
    assert.deepEqual((await other.get("lost"))?.state, { by: "other" });
  });

  it("refuses worker keys and bad keys", async () => {
    const worker = new SessionStore(server.url, { key: await server.makeKey("worker"), space: "booking" });
    await assert.rejects(worker.get("s"), Forbidden);
    await assert.rejects(worker.transact("s", async () => "never"), Forbidden);
    const nobody = new SessionStore(server.url, { key: "ks_not_a_key", space: "booking" });
    await assert.rejects(nobody.set("s", freshState(null)), Unauthorized);
  });

  it("shares its sessions with a Python worker on the same server", async () => {
    const store = open({ space: "shared" });
    await store.set("both", { ...freshState(null), state: { from: "node" } });
    const python = join(dirname(KEEPSTATE_BIN), "python");
    const script = [
      "import asyncio, sys",
      "from keepstate.sessions import SessionState, open_session_store",
      "async def main():",
      "    async with open_session_store(sys.argv[1], key=sys.argv[2], space='shared') as store:",
      "        async def step():",
      "            seen = await store.get('both')",
      "            await store.set('py', SessionState(state={'saw': seen.state}))",
      "        await store.transact('both', step)",
      "asyncio.run(main())",
    ].join("\n");
    const done = spawnSync(python, ["-c", script, server.url, key], { encoding: "utf8" });
    assert.equal(done.status, 0, done.stderr);
    const written = (await store.get("py")) as unknown as { state: unknown };
    assert.deepEqual(written.state, { saw: { from: "node" } });
  });
});
