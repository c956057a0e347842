/**
 * The package as npm would ship it: its public names (exactly this list), its manifest (ES module,
 * types, Node 18+, no runtime dependencies), and declarations that need no Node.js types.
 */

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { describe, it } from "node:test";
import * as keepstate from "keepstate";
import type { EventItem, EventPage, RunEvent, StreamOptions } from "keepstate";
import { PACKAGE_ROOT } from "./support/server.js";

describe("the package", () => {
  it("exports exactly its public names", () => {
    assert.deepEqual(Object.keys(keepstate).sort(), [
      "Agents", "Batch", "CallerState", "Client", "ERRORS", "EventStream", "Forbidden", "HoldRequested", "IdempotencyInFlight",
      "IdempotencyMismatch", "InvalidKey", "InvalidRequest",
      "InvalidValue", "Invocation", "InvocationState", "KeepstateError", "Keys", "LeaseLost", "Memory", "NoEmbedder",
      "NoSession", "NoUser", "NotAList", "NotAnInteger", "NotFound", "NotHeld", "Runs", "Scope", "SessionBusy",
      "SessionLocked", "SessionStore", "Sessions", "TooLarge", "Unauthorized", "Unavailable", "VersionConflict",
      "Worker", "isFinished",
    ]);
  });

  it("exports the types of its calls' arguments and answers (a missing one fails the build)", () => {
    const event: RunEvent = { seq: 1, type: "message", data: null, at: null };
    const page: EventPage = { events: [event], next: null };
    const items: EventItem[] = [{ data: 1 }, { type: "token", data: "a" }];
    const options: StreamOptions = { after: 0 };
    assert.deepEqual([page.events.length, items.length, options.after], [1, 2, 0]);
  });

  it("is an ES module with types for Node 18+, and no runtime dependencies", () => {
    const manifest = JSON.parse(readFileSync(resolve(PACKAGE_ROOT, "package.json"), "utf8"));
    assert.equal(manifest.name, "keepstate");
    assert.equal(manifest.type, "module");
    assert.deepEqual(manifest.exports, { ".": { types: "./dist/index.d.ts", import: "./dist/index.js" } });
    assert.equal(manifest.types, "./dist/index.d.ts");
    assert.deepEqual(manifest.engines, { node: ">=18" });
    assert.equal(manifest.dependencies, undefined);
    assert.ok(manifest.files.includes("dist"));
    for (const [name, version] of Object.entries(manifest.devDependencies as Record<string, string>)) {
      assert.match(version, /^\d+\.\d+\.\d+$/, `${name} is pinned exactly`);
    }
  });

  it("declares its API without Node.js types, so any runtime with fetch can use it", () => {
    const dist = resolve(PACKAGE_ROOT, "dist");
    for (const file of readdirSync(dist).filter((name) => name.endsWith(".d.ts"))) {
      assert.doesNotMatch(readFileSync(resolve(dist, file), "utf8"), /NodeJS\.|from "node:|Buffer/, file);
    }
  });
});
