/**
 * A fresh PostgreSQL schema per test, made and dropped with the repository's Python (psycopg, the
 * driver keepstate itself uses): the SDK has no PostgreSQL driver and needs none. The database is
 * `KEEPSTATE_TEST_POSTGRES` (default the local one, as in the Python suite); when it cannot be
 * reached its tests are skipped, unless `KEEPSTATE_REQUIRE_SERVICES=1`, where they fail.
 */

import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createConnection } from "node:net";
import { dirname, join } from "node:path";
import { KEEPSTATE_BIN } from "./server.js";

export const PG_ADMIN_URL = process.env["KEEPSTATE_TEST_POSTGRES"] ?? "postgresql://postgres@127.0.0.1:5432/test";
const PYTHON = join(dirname(KEEPSTATE_BIN), "python");
const RUN_SQL = "import sys, psycopg\nwith psycopg.connect(sys.argv[1], autocommit=True) as c: c.execute(sys.argv[2])";

function listening(url: string): Promise<boolean> {
  const parsed = new URL(url);
  return new Promise((done) => {
    const socket = createConnection({ host: parsed.hostname || "127.0.0.1", port: Number(parsed.port || 5432) });
    socket.setTimeout(1000);
    socket.once("connect", () => (socket.destroy(), done(true)));
    socket.once("error", () => done(false));
    socket.once("timeout", () => (socket.destroy(), done(false)));
  });
}

/** A reason to skip the PostgreSQL tests, or false when they can run (it throws when they must but cannot). */
export async function skipWithoutPostgres(): Promise<string | false> {
  if (await listening(PG_ADMIN_URL)) return false;
  const why = `PostgreSQL is not reachable at ${PG_ADMIN_URL}`;
  if (process.env["KEEPSTATE_REQUIRE_SERVICES"] === "1") throw new Error(`${why} and KEEPSTATE_REQUIRE_SERVICES=1`);
  return why;
}

function runSql(sql: string): void {
  const done = spawnSync(PYTHON, ["-c", RUN_SQL, PG_ADMIN_URL, sql], { encoding: "utf8" });
  if (done.status !== 0) throw new Error(`${sql} failed: ${done.stderr}`);
}

/** A store URL whose tables live in a new schema; `drop()` removes it. */
export function freshSchema(): { url: string; drop(): void } {
  const schema = `ks_ts_${randomBytes(6).toString("hex")}`;
  runSql(`CREATE SCHEMA ${schema}`);
  const url = `${PG_ADMIN_URL}${PG_ADMIN_URL.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-csearch_path=${schema}`)}`;
  return { url, drop: () => runSql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`) };
}
