/**
 * State scopes over a real server with a live run token: reads of absent keys, versions and
 * compare-and-set, deletes, appends, paged key listings, `update` under contention, odd keys, values.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { VersionConflict } from "keepstate";
import { Inside } from "./support/inside.js";
import { collect, type Server, startServer } from "./support/server.js";

let server: Server;
let inside: Inside;

describe("state scopes", () => {
  before(async () => {
    server = await startServer();
    inside = await Inside.create(server);
  });
  after(() => server.stop());

  describe("get and getVersioned", () => {
    it("read an absent key as the default, and as { value: undefined, version: 0 }", async () => {
      const [plain, fallback, versioned] = await inside.run(async (inv) => [
        await inv.state.run.get("nothing"),
        await inv.state.run.get("nothing", []),
        await inv.state.run.getVersioned("nothing"),
      ]);
      assert.equal(plain, undefined);
      assert.deepEqual(fallback, []);
      assert.deepEqual(versioned, { value: undefined, version: 0 });
    });

    it("tell a stored null from an absent key", async () => {
      const found = await inside.run(async (inv) => {
        await inv.state.run.put("empty", null);
        return [await inv.state.run.get("empty", "default"), await inv.state.run.getVersioned("empty")];
      });
      assert.deepEqual(found, [null, { value: null, version: 1 }]);
    });
  });

  describe("put and delete", () => {
    it("count versions, refuse a stale ifVersion with the current version, and never repeat a version", async () => {
      const seen = await inside.run(async (inv) => {
        const scope = inv.state.agent;
        const first = await scope.put("doc", { a: 1 });
        const second = await scope.put("doc", { a: 2 });
        const onlyIfAbsent = await scope.put("doc", { a: 3 }, { ifVersion: 0 }).catch((error: unknown) => error);
        const guarded = await scope.put("doc", { a: 3 }, { ifVersion: 2 });
        const staleDelete = await scope.delete("doc", { ifVersion: 1 }).catch((error: unknown) => error);
        await scope.delete("doc", { ifVersion: 3 });
        const afterDelete = await scope.getVersioned("doc");
        await scope.delete("doc"); // absent: still fine
        const again = await scope.put("doc", { a: 4 }, { ifVersion: 0 });
        return { first, second, onlyIfAbsent, guarded, staleDelete, afterDelete, again };
      });
      assert.equal(seen.first, 1);
      assert.equal(seen.second, 2);
      assert.ok(seen.onlyIfAbsent instanceof VersionConflict);
      assert.equal(seen.onlyIfAbsent.currentVersion, 2);
      assert.equal(seen.guarded, 3);
      assert.ok(seen.staleDelete instanceof VersionConflict);
      assert.equal(seen.staleDelete.currentVersion, 3);
      assert.deepEqual(seen.afterDelete, { value: undefined, version: 0 });
      assert.ok(seen.again > 3, `a version never repeats, got ${seen.again}`);
    });

    it("round-trips JSON values: nesting, unicode, big ids as strings", async () => {
      const value = { text: "héllo ✓ 😀 \"quoted\" \\ /", list: [1, 2.5, -3e-7, true, null], id: "9223372036854775807", deep: { a: { b: { c: [[]] } } } };
      const back = await inside.run(async (inv) => {
        await inv.state.run.put("value", value);
        return inv.state.run.get("value");
      });
      assert.deepEqual(back, value);
    });

    it("keep `.` and `..` as keys, not path steps", async () => {
      const found = await inside.run(async (inv) => {
        await inv.state.run.put(".", "dot");
        await inv.state.run.put("..", "dots");
        await inv.state.run.put("a:b-c_d.e", "mixed");
        return {
          values: [await inv.state.run.get("."), await inv.state.run.get(".."), await inv.state.run.get("a:b-c_d.e")],
          keys: (await collect(inv.state.run.keys())).map((item) => item.key),
        };
      });
      assert.deepEqual(found.values, ["dot", "dots", "mixed"]);
      assert.deepEqual(found.keys, [".", "..", "a:b-c_d.e"]);
    });
  });

  describe("append", () => {
    it("creates the list and answers its version and length", async () => {
      const seen = await inside.run(async (inv) => {
        const first = await inv.state.run.append("log", [{ n: 1 }, { n: 2 }]);
        const second = await inv.state.run.append("log", [{ n: 3 }]);
        return { first, second, list: await inv.state.run.get("log") };
      });
      assert.deepEqual(seen.first, { version: 1, length: 2 });
      assert.deepEqual(seen.second, { version: 2, length: 3 });
      assert.deepEqual(seen.list, [{ n: 1 }, { n: 2 }, { n: 3 }]);
    });

    it("from many concurrent calls loses nothing", async () => {
      const list = await inside.run(async (inv) => {
        await Promise.all(Array.from({ length: 30 }, (_, n) => inv.state.run.append("many", [n])));
        return inv.state.run.get<number[]>("many");
      });
      assert.deepEqual([...list].sort((a, b) => a - b), Array.from({ length: 30 }, (_, n) => n));
    });
  });

  describe("keys", () => {
    it("lists every key with its version in key order, across pages of 100, by prefix", async () => {
      const names = Array.from({ length: 105 }, (_, n) => `k-${String(n).padStart(3, "0")}`);
      const seen = await inside.run(async (inv) => {
        for (const name of names) await inv.state.run.put(name, name);
        await inv.state.run.put("other", 1);
        await inv.state.run.put("other", 2);
        return { prefixed: await collect(inv.state.run.keys({ prefix: "k-" })), all: await collect(inv.state.run.keys()) };
      });
      assert.deepEqual(seen.prefixed.map((item) => item.key), names);
      assert.ok(seen.prefixed.every((item) => item.version === 1));
      assert.equal(seen.all.length, 106);
      assert.deepEqual(seen.all.at(-1), { key: "other", version: 2 });
    });
  });

  describe("update", () => {
    it("is a compare-and-set loop: 40 concurrent increments end at exactly 40", async () => {
      let calls = 0;
      const total = await inside.run(async (inv) => {
        const increment = () => inv.state.agent.update<number>("n", (n) => (calls++, n + 1), { default: 0 });
        await Promise.all(Array.from({ length: 40 }, increment));
        return inv.state.agent.get("n");
      });
      assert.equal(total, 40);
      assert.ok(calls > 40, `concurrent updates conflicted and retried (${calls} calls of fn)`);
    });

    it("awaits an async fn and starts from undefined without a default", async () => {
      const seen = await inside.run(async (inv) => {
        const first = await inv.state.run.update<string[]>("tags", async (tags) => [...(tags ?? []), "a"]);
        const second = await inv.state.run.update<string[]>("tags", async (tags) => [...(tags ?? []), "b"]);
        return { first, second };
      });
      assert.deepEqual(seen, { first: ["a"], second: ["a", "b"] });
    });
  });

  describe("scopes", () => {
    it("session and user scopes are shared by the runs of a session, the run scope is not", async () => {
      const session = await inside.client.sessions.create({ user: "cust-77" });
      const agent = "scoped-agent";
      await inside.run(async (inv) => {
        await inv.state.run.put("mine", 1);
        await inv.state.session.put("ours", 2);
        await inv.state.user.put("theirs", 3);
      }, { sessionId: session.id, agent });
      const other = await inside.client.sessions.create({ user: "cust-77" });
      const seen = await inside.run(async (inv) => ({
        run: await inv.state.run.get("mine"),
        session: await inv.state.session.get("ours"),
        user: await inv.state.user.get("theirs"),
      }), { sessionId: other.id, agent });
      assert.deepEqual(seen, { run: undefined, session: undefined, user: 3 });
      const same = await inside.run(async (inv) => inv.state.session.get("ours"), { sessionId: session.id, agent });
      assert.equal(same, 2);
    });
  });
});
