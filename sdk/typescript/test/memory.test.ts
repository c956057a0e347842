/**
 * `inv.memory` over a real server with live run tokens: documents, versions, listing, search, and
 * the end user's folder `users/{user}/`, which one customer's run never sees of another's.
 */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { InvalidRequest, NoEmbedder, NotFound, NoUser, VersionConflict } from "keepstate";
import type { DocumentInfo } from "keepstate";
import { Inside } from "./support/inside.js";
import { collect, type Server, startServer } from "./support/server.js";

let server: Server;
let inside: Inside;
const AGENT = "memory-agent";

async function asUser<T>(user: string | undefined, body: Parameters<Inside["run"]>[0]): Promise<T> {
  const session = await inside.client.sessions.create(user === undefined ? {} : { user });
  return inside.run(body, { sessionId: session.id, agent: AGENT }) as Promise<T>;
}

describe("memory", () => {
  before(async () => {
    server = await startServer();
    inside = await Inside.create(server);
  });
  after(() => server.stop());

  it("reads, writes with versions and ifVersion, and deletes", async () => {
    const seen = await asUser<Record<string, unknown>>("ana", async (inv) => {
      const absent = await inv.memory.read("notes/none");
      const first = await inv.memory.write("notes/a", "Title\nbody ✓", { metadata: { tag: "x" } });
      const taken = await inv.memory.write("notes/a", "again", { ifVersion: 0 }).catch((error: unknown) => error);
      const second = await inv.memory.write("notes/a", "second", { ifVersion: 1 });
      const read = await inv.memory.read("notes/a");
      await inv.memory.delete("notes/a", { ifVersion: 2 });
      const gone = await inv.memory.read("notes/a");
      const third = await inv.memory.write("notes/a", "third");
      return { absent, first, taken, second, read, gone, third };
    });
    assert.equal(seen.absent, undefined);
    assert.equal(seen.first, 1);
    assert.ok(seen.taken instanceof VersionConflict && seen.taken.currentVersion === 1);
    assert.equal(seen.second, 2);
    const read = seen.read as { path: string; text: string; metadata: object; version: number; updatedAt: number };
    assert.deepEqual([read.path, read.text, read.metadata, read.version], ["notes/a", "second", {}, 2]);
    assert.ok(read.updatedAt > 0);
    assert.equal(seen.gone, undefined);
    assert.equal(seen.third, 3, "a version never repeats");
  });

  it("lists in path order across pages, by prefix", async () => {
    const names = Array.from({ length: 103 }, (_, n) => `kb-list/${String(n).padStart(3, "0")}`);
    const listed = await asUser<DocumentInfo[]>("ana", async (inv) => {
      for (const name of names) await inv.memory.write(name, name);
      return collect(inv.memory.list({ prefix: "kb-list/" }));
    });
    assert.deepEqual(listed.map((info) => info.path), names);
  });

  it("searches with ranking, phrases and stemming; a malformed query is InvalidRequest", async () => {
    const seen = await asUser<Record<string, unknown>>("ana", async (inv) => {
      await inv.memory.write("kb/refunds", "Refund policy\nMoney back within 30 days.");
      await inv.memory.write("kb/shipping", "Shipping\nParcels arrive in days; a refund when late.");
      await inv.memory.write("kb/run", "Training\nThe runner runs daily.");
      return {
        ranked: (await inv.memory.search("refund", { prefix: "kb/" })).map((hit) => hit.path),
        phrase: (await inv.memory.search('"money back"')).map((hit) => hit.path),
        stemmed: (await inv.memory.search("running", { limit: 5 })).map((hit) => hit.path),
        snippet: (await inv.memory.search("parcels"))[0]?.snippet,
        malformed: await inv.memory.search('refund "policy').catch((error: unknown) => error),
      };
    });
    assert.deepEqual(seen.ranked, ["kb/refunds", "kb/shipping"]);
    assert.deepEqual(seen.phrase, ["kb/refunds"]);
    assert.deepEqual(seen.stemmed, ["kb/run"]);
    assert.match(String(seen.snippet), /\*\*Parcels\*\*/);
    assert.ok(seen.malformed instanceof InvalidRequest);
  });

  it("keeps each end user's folder to that user's runs", async () => {
    await asUser("bea", async (inv) => inv.memory.write("users/{user}/secret", "bea's zebra code"));
    const intruder = await asUser<Record<string, unknown>>("cal", async (inv) => ({
      read: await inv.memory.read("users/bea/secret"),
      write: await inv.memory.write("users/bea/secret", "pwned").catch((error: unknown) => error),
      dots: await inv.memory.read("users/{user}/../bea/secret").catch((error: unknown) => error),
      listed: (await collect(inv.memory.list({ prefix: "users/" }))).map((info) => info.path),
      hits: (await inv.memory.search("zebra")).map((hit) => hit.path),
      own: await inv.memory.write("users/{user}/secret", "cal's own"),
    }));
    assert.equal(intruder.read, undefined);
    assert.ok(intruder.write instanceof NotFound);
    assert.ok(intruder.dots instanceof InvalidRequest, String(intruder.dots));
    assert.deepEqual(intruder.listed, []);
    assert.deepEqual(intruder.hits, []);
    assert.equal(intruder.own, 1);
    const bea = await asUser<string | undefined>("bea", async (inv) => (await inv.memory.read("users/bea/secret"))?.text);
    assert.equal(bea, "bea's zebra code");
    const anonymous = await asUser<unknown>(undefined, async (inv) =>
      inv.memory.write("users/{user}/x", "x").catch((error: unknown) => error));
    assert.ok(anonymous instanceof NoUser);
  });

  it("refuses a search by meaning where the server has no embedder", async () => {
    const refused = await asUser<unknown>(undefined, async (inv) =>
      inv.memory.search("trip", { mode: "semantic" }).catch((error: unknown) => error));
    assert.ok(refused instanceof NoEmbedder && refused.status === 409, String(refused));
  });
});

describe("memory by meaning", () => {
  let meaningServer: Server;
  let meaningInside: Inside;

  before(async () => {
    meaningServer = await startServer({ embedder: "meaning:concepts" });
    meaningInside = await Inside.create(meaningServer);
  });
  after(() => meaningServer.stop());

  it("searches by meaning, both, or words, with a metadata filter and the folder rule", async () => {
    const run = async <T>(user: string, body: Parameters<Inside["run"]>[0]): Promise<T> => {
      const session = await meaningInside.client.sessions.create({ user });
      return meaningInside.run(body, { sessionId: session.id, agent: AGENT }) as Promise<T>;
    };
    await run("dee", async (inv) => {
      await inv.memory.write("kb/trip", "The trip was called off because of the storm.", { metadata: { kind: "news" } });
      await inv.memory.write("kb/meals", "Vegetarian meals on every flight.", { metadata: { kind: "menu" } });
      await inv.memory.write("users/{user}/trip", "dee's flight was scrapped");
    });
    const seen = await run<Record<string, unknown>>("eve", async (inv) => ({
      words: await inv.memory.search("flight cancelled", { mode: "text" }),
      meaning: await inv.memory.search("flight cancelled", { mode: "semantic" }),
      both: (await inv.memory.search("flight cancelled")).map((hit) => hit.path),
      filtered: (await inv.memory.search("flight cancelled", { mode: "semantic", filter: { kind: "menu" } }))
        .map((hit) => hit.path),
    }));
    assert.deepEqual(seen.words, []);
    const [first] = seen.meaning as { path: string; score: number; snippet: string; version: number }[];
    assert.deepEqual([first?.path, first?.snippet, first?.version], ["kb/trip", "The trip was called off because of the storm.", 1]);
    assert.ok((first?.score ?? 0) > 0.5);
    assert.deepEqual((seen.meaning as { path: string }[]).map((hit) => hit.path).sort(), ["kb/meals", "kb/trip"]);
    assert.equal((seen.both as string[])[0], "kb/trip");
    assert.deepEqual(seen.filtered, ["kb/meals"]);
  });
});
