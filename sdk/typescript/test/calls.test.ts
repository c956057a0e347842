/**
 * The State API's newer calls and the lifecycle's, against a real server: list reads, trim and pop;
 * incr and patch; expiry; atomic batches; state for callers; agents; session metadata updates; queue
 * timeouts. Written from `http-api.md` before the server had them, and kept as their test.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Client, Forbidden, InvalidValue, NotAList, NotAnInteger, NotFound, TooLarge, VersionConflict, Worker,
} from "keepstate";
import { Inside } from "./support/inside.js";
import { agentName, collect, type Server, sleepMs, startServer } from "./support/server.js";

let server: Server;
let inside: Inside;
let admin: Client;

async function thrown(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(() => assert.fail("expected a rejection"), (error: unknown) => error);
}

describe("lists, store writes, expiry, batches, caller state and the lifecycle", () => {
  before(async () => {
    server = await startServer();
    inside = await Inside.create(server);
    admin = new Client(server.url, { key: server.adminKey });
  });
  after(() => server.stop());

  describe("lists: tail, items, trim, pop", () => {
    it("read part of a list, trim it, pop its last item, each a write that adds 1 to the version", async () => {
      const seen = await inside.run(async (inv) => {
        const scope = inv.state.run;
        await scope.append("list", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        return {
          tail: await scope.tail("list", 3),
          items: await scope.items("list", { start: 2, limit: 3 }),
          trim: await scope.trim("list", 4),
          afterTrim: await scope.get("list"),
          pop: await scope.pop("list"),
          staleTrim: await thrown(scope.trim("list", 1, { ifVersion: 1 })),
          stalePop: await thrown(scope.pop("list", { ifVersion: 1 })),
          absentTail: await scope.tail("nothing", 5),
          absentPop: await scope.pop("nothing"),
        };
      });
      assert.deepEqual(seen.tail, { items: [7, 8, 9], version: 1, length: 10 });
      assert.deepEqual(seen.items, { items: [2, 3, 4], version: 1, length: 10 });
      assert.deepEqual(seen.trim, { version: 2, length: 4 });
      assert.deepEqual(seen.afterTrim, [6, 7, 8, 9]);
      assert.deepEqual(seen.pop, { item: 9, version: 3, length: 3 });
      assert.ok(seen.staleTrim instanceof VersionConflict && seen.staleTrim.currentVersion === 3);
      assert.ok(seen.stalePop instanceof VersionConflict && seen.stalePop.currentVersion === 3);
      assert.deepEqual(seen.absentTail, { items: [], version: 0, length: 0 });
      assert.equal(seen.absentPop, undefined);
    });

    it("pop of an emptied list is undefined; every list call on a non-list is NotAList", async () => {
      const seen = await inside.run(async (inv) => {
        await inv.state.run.append("one", ["x"]);
        const popped = await inv.state.run.pop("one");
        const empty = await inv.state.run.pop("one");
        await inv.state.run.put("scalar", { not: "a list" });
        const errors = await Promise.all([
          thrown(inv.state.run.tail("scalar", 1)), thrown(inv.state.run.items("scalar", { start: 0, limit: 1 })),
          thrown(inv.state.run.trim("scalar", 1)), thrown(inv.state.run.pop("scalar")),
        ]);
        return { popped, empty, errors };
      });
      assert.equal(seen.popped?.item, "x");
      assert.equal(seen.empty, undefined);
      for (const error of seen.errors) assert.ok(error instanceof NotAList, String(error));
    });
  });

  describe("writes done by the store", () => {
    it("incr counts from 0, takes by and ifVersion, refuses a non-integer and an overflow", async () => {
      const seen = await inside.run(async (inv) => {
        const scope = inv.state.agent;
        const first = await scope.incr("hits");
        const more = await scope.incr("hits", { by: 5 });
        const stale = await thrown(scope.incr("hits", { ifVersion: 1 }));
        await scope.put("name", "text");
        const notInteger = await thrown(scope.incr("name"));
        await scope.incr("huge", { by: 2 ** 62 });
        const overflow = await thrown(scope.incr("huge", { by: 2 ** 62 }));
        return { first, more, stale, notInteger, overflow, huge: await scope.get("huge") };
      });
      assert.deepEqual(seen.first, { value: 1, version: 1 });
      assert.deepEqual(seen.more, { value: 6, version: 2 });
      assert.ok(seen.stale instanceof VersionConflict && seen.stale.currentVersion === 2);
      assert.ok(seen.notInteger instanceof NotAnInteger, String(seen.notInteger));
      assert.equal(seen.notInteger.code, "not_an_integer");
      assert.equal(seen.notInteger.status, 409);
      assert.ok(seen.overflow instanceof InvalidValue, String(seen.overflow));
      assert.equal(seen.huge, 2 ** 62, "nothing of a refused incr is written");
    });

    it("patch applies a JSON Merge Patch, from {} when absent; TooLarge past 1 MiB", async () => {
      const seen = await inside.run(async (inv) => {
        const first = await inv.state.run.patch("doc", { a: 1, b: { c: 2 } });
        const second = await inv.state.run.patch("doc", { b: { c: null, d: 3 } }, { ifVersion: 1 });
        await inv.state.run.put("big", { text: "x".repeat(700 * 1024) });
        const tooLarge = await thrown(inv.state.run.patch("big", { more: "y".repeat(700 * 1024) }));
        return { first, second, tooLarge };
      });
      assert.deepEqual(seen.first, { value: { a: 1, b: { c: 2 } }, version: 1 });
      assert.deepEqual(seen.second, { value: { a: 1, b: { d: 3 } }, version: 2 });
      assert.ok(seen.tooLarge instanceof TooLarge, String(seen.tooLarge));
    });
  });

  describe("expiry", () => {
    it("a key written with ttlSeconds answers expiresAt, then reads as absent, and its version never repeats", async () => {
      const seen = await inside.run(async (inv) => {
        const scope = inv.state.run;
        const before = Date.now();
        await scope.put("short", "lived", { ttlSeconds: 1 });
        const fresh = await scope.getVersioned("short");
        await scope.append("log", [1], { ttlSeconds: 1 });
        await scope.incr("count", { ttlSeconds: 1 });
        await sleepMs(1300);
        const gone = [await scope.getVersioned("short"), await scope.get("log"), await scope.get("count")];
        const listed = (await collect(scope.keys())).map((item) => item.key);
        const again = await scope.put("short", "back", { ifVersion: 0 });
        return { before, fresh, gone, listed, again };
      });
      assert.equal(seen.fresh.value, "lived");
      assert.ok(typeof seen.fresh.expiresAt === "number" && seen.fresh.expiresAt >= seen.before + 500);
      assert.deepEqual(seen.gone, [{ value: undefined, version: 0 }, undefined, undefined]);
      assert.deepEqual(seen.listed, []);
      assert.ok(seen.again > 1, `a version never repeats, got ${seen.again}`);
    });
  });

  describe("atomic batch", () => {
    it("applies every op and answers each one's result, in order", async () => {
      const results = await inside.run(async (inv) => {
        await inv.state.run.put("gone", 1);
        return inv.state.batch()
          .put("run", "a", 1).append("run", "log", ["x"]).incr("run", "n").patch("run", "p", { x: 1 })
          .trim("run", "log", 1).delete("run", "gone").commit();
      });
      assert.deepEqual(results, [
        { version: 1 }, { version: 1, length: 1 }, { value: 1, version: 1 }, { value: { x: 1 }, version: 1 },
        { version: 2, length: 1 }, {},
      ]);
    });

    it("on a failed ifVersion lists every conflict and writes nothing", async () => {
      const seen = await inside.run(async (inv) => {
        await inv.state.run.put("a", 1);
        await inv.state.run.put("b", 1);
        const error = await thrown(inv.state.batch()
          .put("run", "a", 2, { ifVersion: 5 }).put("run", "fresh", 1, { ifVersion: 0 })
          .put("run", "b", 2, { ifVersion: 0 }).commit());
        return { error, fresh: await inv.state.run.getVersioned("fresh"), a: await inv.state.run.get("a") };
      });
      assert.ok(seen.error instanceof VersionConflict);
      assert.deepEqual(seen.error.conflicts, [
        { index: 0, scope: "run", key: "a", currentVersion: 1 },
        { index: 2, scope: "run", key: "b", currentVersion: 1 },
      ]);
      assert.deepEqual(seen.fresh, { value: undefined, version: 0 });
      assert.equal(seen.a, 1);
    });

    it("on any other error answers it with the index of the op and writes nothing", async () => {
      const seen = await inside.run(async (inv) => {
        await inv.state.run.put("scalar", 1);
        const error = await thrown(inv.state.batch().put("run", "first", 1).append("run", "scalar", [2]).commit());
        return { error, first: await inv.state.run.getVersioned("first") };
      });
      assert.ok(seen.error instanceof NotAList);
      assert.equal(seen.error.index, 1);
      assert.deepEqual(seen.first, { value: undefined, version: 0 });
    });
  });

  describe("state for callers", () => {
    it("a session's owner reads and writes what the session's runs see", async () => {
      const agent = agentName("chatty");
      const session = await inside.client.sessions.create();
      await inside.run(async (inv) => void (await inv.state.session.append("history", ["from the agent"])), { sessionId: session.id, agent });
      const scope = inside.client.state.session(session.id, agent);
      assert.deepEqual(await scope.get("history"), ["from the agent"]);
      await scope.append("history", ["from the caller"]);
      await scope.put(".", "a dot key");
      assert.deepEqual((await scope.tail("history", 1)).items, ["from the caller"]);
      assert.deepEqual((await collect(scope.keys())).map((item) => item.key), [".", "history"]);
      const read = await inside.run(async (inv) => [await inv.state.session.get("history"), await inv.state.session.get(".")], { sessionId: session.id, agent });
      assert.deepEqual(read, [["from the agent", "from the caller"], "a dot key"]);
    });

    it("a run's owner uses its run scope; admins the agent and user scopes", async () => {
      const agent = agentName("caller-state");
      const session = await inside.client.sessions.create({ user: "cust-5" });
      let runId = "";
      await inside.run(async (inv) => {
        runId = inv.runId;
        await inv.state.run.put("progress", 1);
        await inv.state.agent.put("setting", "on");
        await inv.state.user.put("pref", "dark");
      }, { sessionId: session.id, agent });
      assert.equal(await inside.client.state.run(runId).get("progress"), 1);
      assert.equal(await admin.state.agent(agent).get("setting"), "on");
      assert.deepEqual(await admin.state.user("cust-5", agent).patch("prefs", { theme: "dark" }), { value: { theme: "dark" }, version: 1 });
      assert.equal(await admin.state.user("cust-5", agent).get("pref"), "dark");
      assert.deepEqual(await admin.state.agent(agent).incr("n", { by: 2 }), { value: 2, version: 1 });
    });

    it("a member gets 403 on agent and user prefixes, and 404 on another member's session", async () => {
      const agent = agentName("private");
      assert.ok((await thrown(inside.client.state.agent(agent).get("k"))) instanceof Forbidden);
      assert.ok((await thrown(inside.client.state.user("u1", agent).get("k"))) instanceof Forbidden);
      const session = await inside.client.sessions.create();
      const stranger = new Client(server.url, { key: await server.makeKey("member") });
      assert.ok((await thrown(stranger.state.session(session.id, agent).put("k", 1))) instanceof NotFound);
    });
  });

  describe("agents", () => {
    it("lists every agent a worker claimed for or that has runs, with its queues", async () => {
      const claimed = agentName("claimed");
      const queued = agentName("queued");
      const worker = new Worker(server.url, { key: inside.workerKey, claimWait: 0.2 }).agent(claimed, () => null);
      await inside.client.runs.start(claimed, null);
      assert.equal(await worker.run({ stopAfter: 1 }), 1);
      await inside.client.runs.start(queued, null);
      const byName = new Map((await admin.agents.list()).map((agent) => [agent.name, agent]));
      assert.equal(typeof byName.get(claimed)?.lastClaimAt, "number");
      const waiting = byName.get(queued);
      assert.ok(waiting, "an agent with runs is listed before any worker claimed for it");
      assert.deepEqual([waiting.queued, waiting.running, waiting.held], [1, 0, 0]);
    });
  });

  describe("sessions.update", () => {
    it("replaces a session's metadata", async () => {
      const session = await inside.client.sessions.create({ metadata: { title: "old" } });
      const updated = await inside.client.sessions.update(session.id, { metadata: { title: "new" } });
      assert.deepEqual(updated.metadata, { title: "new" });
      assert.deepEqual((await inside.client.sessions.get(session.id)).metadata, { title: "new" });
    });
  });

  describe("sessions.fork", () => {
    it("copies the session's state with the named lists cut, shows its parent, and refuses a non-list", async () => {
      const session = await inside.client.sessions.create({ metadata: { title: "t" } });
      assert.equal(session.parent, null);
      const chat = inside.client.state.session(session.id, "chat");
      await chat.append("messages", ["m0", "m1", "m2"]);
      await chat.put("title", "hello");
      const fork = await inside.client.sessions.fork(session.id, { lists: { "chat/messages": 1 } });
      assert.equal(fork.parent, session.id);
      assert.deepEqual(await inside.client.sessions.get(fork.id), fork);
      assert.deepEqual(await inside.client.state.session(fork.id, "chat").get("messages"), ["m0"]);
      assert.equal(await inside.client.state.session(fork.id, "chat").get("title"), "hello");
      assert.deepEqual(await chat.get("messages"), ["m0", "m1", "m2"]);
      const refused = await thrown(inside.client.sessions.fork(session.id, { id: `${session.id}-x`, lists: { "chat/title": 0 } }));
      assert.ok(refused instanceof NotAList);
      assert.ok((await thrown(inside.client.sessions.get(`${session.id}-x`))) instanceof NotFound);
    });
  });

  describe("queueTimeout", () => {
    it("a run nobody claims in time becomes expired and no longer blocks its session", async () => {
      const session = await inside.client.sessions.create();
      const agent = agentName("typo");
      const run = await inside.client.runs.start(agent, null, { sessionId: session.id, queueTimeout: 1 });
      const expired = await inside.client.runs.wait(run.id, { timeout: 15 });
      assert.equal(expired.status, "expired");
      assert.equal((await inside.client.runs.start(agent, null, { sessionId: session.id })).status, "queued");
    });
  });
});
