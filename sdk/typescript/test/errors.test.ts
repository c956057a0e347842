/**
 * Every error code today's server can produce arrives as its class, with `code`, `status` and its
 * details in camelCase; what the SDK refuses before sending is the same class, and is never sent.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Client, ERRORS, Forbidden, type FetchLike, InvalidKey, InvalidRequest, InvalidValue, KeepstateError, NoSession,
  NotAList, NotFound, NotHeld, NoUser, type Scope, SessionBusy, TooLarge, Unauthorized, Unavailable, VersionConflict,
} from "keepstate";
import { Sender, buildConfig } from "../dist/transport.js";
import { Inside } from "./support/inside.js";
import { agentName, freePort, type Server, startServer } from "./support/server.js";

let server: Server;
let inside: Inside;

/** Compiles only while each class carries its code as a literal type (`"not_found"`, not `string`). */
function branch(error: KeepstateError): string {
  if (error instanceof NotFound) return literal(error.code, "not_found");
  if (error instanceof Unauthorized) return literal(error.code, "unauthorized");
  if (error instanceof VersionConflict) return `conflict at ${error.currentVersion}`;
  return error.code;
}

function literal<C extends string>(code: C, expected: string extends C ? never : C): string {
  return code === expected ? code.replace("_", " ") : "wrong";
}

describe("errors", () => {
  before(async () => {
    server = await startServer();
    inside = await Inside.create(server);
  });
  after(() => server.stop());

  /** The error `promise` rejects with, checked to be an instance of `cls` with its code and status. */
  async function refused<E extends KeepstateError>(
    promise: Promise<unknown>, cls: abstract new (...args: never[]) => E, status: number,
  ): Promise<E> {
    const error = await promise.then(() => undefined, (thrown: unknown) => thrown);
    assert.ok(error instanceof cls, `expected ${cls.name}, got ${String(error)}`);
    assert.ok(error instanceof KeepstateError);
    assert.equal(error.code, (cls as unknown as typeof KeepstateError).code);
    assert.equal(error.status, status);
    assert.equal(error.name, cls.name);
    return error;
  }

  describe("errors from the server", () => {
    it("invalid_key: a key prefix outside the charset", async () => {
      const error = await inside.run(async (inv) => refused(inv.state.run.keys({ prefix: "bad/prefix" }).next(), InvalidKey, 400));
      assert.match(error.message, /prefix/);
    });

    it("invalid_value, with the JSON path of the first bad place", async () => {
      const error = await inside.run(async (inv) => {
        const sender = new Sender(buildConfig(server.url, {}));
        // NaN cannot leave the SDK's own encoder, so this body is written by hand.
        return refused(sender.send({
          method: "PUT", path: "/v0/state/run/k", token: tokenOf(inv),
          body: '{"value":{"a":[1,NaN]}}', parse: () => null,
        }), InvalidValue, 400);
      });
      assert.equal(error.path, "$.value.a[1]");
      assert.deepEqual(error.details, { path: "$.value.a[1]" });
    });

    it("invalid_request: a role that does not exist", async () => {
      const admin = new Client(server.url, { key: server.adminKey });
      const error = await refused(admin.keys.create("boss"), InvalidRequest, 400);
      assert.match(error.message, /role/);
    });

    it("unauthorized: an unknown key, and a run token after its invocation ended", async () => {
      await refused(new Client(server.url, { key: "ks_not_a_key" }).sessions.get("x"), Unauthorized, 401);
      await refused(new Client(server.url, { key: undefined }).runs.list().next(), Unauthorized, 401);
      let scope: Scope | undefined;
      await inside.run(async (inv) => void (scope = inv.state.run));
      await refused(scope!.get("k"), Unauthorized, 401);
    });

    it("forbidden: a member creating a key", async () => {
      await refused(inside.client.keys.create("admin"), Forbidden, 403);
    });

    it("not_found: a session and a run that do not exist", async () => {
      await refused(inside.client.sessions.get("no-such-session"), NotFound, 404);
      await refused(inside.client.runs.get("run_0000"), NotFound, 404);
    });

    it("version_conflict, with currentVersion", async () => {
      const error = await inside.run(async (inv) => {
        await inv.state.run.put("k", 1);
        await inv.state.run.put("k", 2);
        return refused(inv.state.run.put("k", 3, { ifVersion: 1 }), VersionConflict, 409);
      });
      assert.equal(error.currentVersion, 2);
      assert.equal(error.details["currentVersion"], 2);
    });

    it("not_a_list: appending to a value that is not a list", async () => {
      await inside.run(async (inv) => {
        await inv.state.run.put("scalar", 5);
        await refused(inv.state.run.append("scalar", [1]), NotAList, 409);
      });
    });

    it("no_session and no_user: scopes a run does not have", async () => {
      await inside.run(async (inv) => {
        await refused(inv.state.session.get("k"), NoSession, 409);
        await refused(inv.state.user.put("k", 1), NoUser, 409);
      });
      const session = await inside.client.sessions.create();
      await inside.run(async (inv) => void (await refused(inv.state.user.get("k"), NoUser, 409)), { sessionId: session.id });
    });

    it("session_busy: a second turn while one is queued", async () => {
      const session = await inside.client.sessions.create();
      const agent = agentName("idle");
      await inside.client.runs.start(agent, null, { sessionId: session.id });
      await refused(inside.client.runs.start(agent, null, { sessionId: session.id }), SessionBusy, 409);
      await refused(inside.client.sessions.delete(session.id), SessionBusy, 409);
    });

    it("not_held: a decision for a run that is not held", async () => {
      const run = await inside.client.runs.start(agentName("idle"), null);
      await refused(inside.client.runs.decide(run.id, { approved: true }), NotHeld, 409);
    });

    it("too_large: an append that would take the list past 1 MiB", async () => {
      const half = "x".repeat(600 * 1024);
      await inside.run(async (inv) => {
        await inv.state.run.append("big", [half]);
        await refused(inv.state.run.append("big", [half]), TooLarge, 413);
        assert.equal((await inv.state.run.get<string[]>("big")).length, 1, "nothing of a refused append is written");
      });
    });

    it("unavailable: nothing listens at the address", async () => {
      const port = await freePort();
      const client = new Client(`http://127.0.0.1:${port}`, { key: "k", retries: 1 });
      const error = await refused(client.sessions.create(), Unavailable, 503);
      assert.equal(error.retryAfter, 1);
      assert.match(error.message, /cannot reach keepstate at http:\/\/127\.0\.0\.1:\d+: fetch failed: ECONNREFUSED/);
    });

    it("each class has its code as a literal type, and instanceof chains narrow", () => {
      assert.equal(branch(new NotFound("x")), "not found");
      assert.equal(branch(new Unauthorized("x")), "unauthorized");
      assert.equal(branch(new VersionConflict("x", { currentVersion: 4 })), "conflict at 4");
      assert.equal(branch(new SessionBusy("x")), "session_busy");
    });

    it("has one class per code of the spec", () => {
      assert.deepEqual([...ERRORS.keys()].sort(), [
        "forbidden", "idempotency_in_flight", "idempotency_mismatch", "invalid_key", "invalid_request", "invalid_value", "lease_lost", "no_embedder", "no_session",
        "no_user", "not_a_list", "not_an_integer", "not_found", "not_held", "session_busy", "session_locked",
        "too_large", "unauthorized", "unavailable", "version_conflict",
      ]);
    });
  });

  describe("refused before sending", () => {
    let sent = 0;
    const counting: FetchLike = (input, init) => (sent++, fetch(input, init));

    /** Inside a run, with a client whose requests are counted, `body` must throw `cls` without a request. */
    async function refusedLocally<E extends KeepstateError>(
      cls: abstract new (...args: never[]) => E, body: (client: Client, scope: Scope) => Promise<unknown>,
    ): Promise<E> {
      return inside.run(async (inv) => {
        const client = new Client(server.url, { key: inside.memberKey, fetch: counting });
        const before = sent;
        const error = await refused(Promise.resolve().then(() => body(client, inv.state.run)), cls, (cls as unknown as typeof KeepstateError).status);
        assert.equal(sent, before, "nothing was sent");
        return error;
      });
    }

    it("keys outside the charset, empty or too long", async () => {
      for (const key of ["a/b", "", "x".repeat(201), "sp ace", "ünï"]) {
        await refusedLocally(InvalidKey, (_, scope) => scope.get(key));
      }
      await refusedLocally(InvalidKey, (client) => client.state.session("s", "bad agent").get("k"));
    });

    it("values the server would refuse, each with its path", async () => {
      const cyclic: Record<string, unknown> = {};
      cyclic["self"] = cyclic;
      let deep: unknown = 1;
      for (let n = 0; n < 129; n++) deep = [deep];
      const cases: [unknown, string][] = [
        [Number.NaN, "$"], [{ a: [1, Number.POSITIVE_INFINITY] }, "$.a[1]"], [{ n: 2 ** 63 }, "$.n"],
        [{ "odd key": -(2 ** 64) }, '$["odd key"]'], [{ big: 10n }, "$.big"], [{ m: new Map() }, "$.m"],
        [["ok", "nul\u0000"], "$[1]"], [{ s: "\ud800" }, "$.s"], [{ ["\udc00"]: 1 }, '$["\\udc00"]'],
        [undefined, "$"],
      ];
      for (const [value, path] of cases) {
        const error = await refusedLocally(InvalidValue, (_, scope) => scope.put("k", value));
        assert.equal(error.path, path, `${String(error.message)} for ${path}`);
      }
      assert.match((await refusedLocally(InvalidValue, (_, scope) => scope.put("k", deep))).message, /nesting deeper than 128/);
      assert.match((await refusedLocally(InvalidValue, (_, scope) => scope.put("k", cyclic))).message, /nesting/);
      const item = await refusedLocally(InvalidValue, (_, scope) => scope.append("k", [1, { x: Number.NaN }]));
      assert.equal(item.path, "$[1].x");
      const input = await refusedLocally(InvalidValue, (client) => client.runs.start("a", { x: [Number.NaN] }));
      assert.equal(input.path, "$.input.x[0]");
    });

    it("what is fine: 1e21 and past (written with an exponent), 2^53, dates, undefined properties", async () => {
      const back = await inside.run(async (inv) => {
        await inv.state.run.put("k", { e: 1e300, safe: 2 ** 53, when: new Date(0), gone: undefined, list: [undefined] });
        return inv.state.run.get("k");
      });
      assert.deepEqual(back, { e: 1e300, safe: 2 ** 53, when: "1970-01-01T00:00:00.000Z", list: [null] });
    });

    it("a value over 1 MiB, and bad options", async () => {
      const error = await refusedLocally(TooLarge, (_, scope) => scope.put("k", "x".repeat(1024 * 1024)));
      assert.match(error.message, /1048578 bytes/);
      await refusedLocally(TooLarge, (_, scope) => scope.append("k", ["é".repeat(300_000), "é".repeat(300_000)]));
      await refusedLocally(InvalidRequest, (_, scope) => scope.put("k", 1, { ifVersion: -1 }));
      await refusedLocally(InvalidRequest, (_, scope) => scope.put("k", 1, { ttlSeconds: 0 }));
      await refusedLocally(InvalidRequest, (_, scope) => scope.append("k", "not a list" as unknown as unknown[]));
    });
  });

  /** The run token of an invocation, for requests written by hand (it is not part of the public API). */
  function tokenOf(inv: unknown): string {
    return (inv as { token: string }).token;
  }
});
