/**
 * A real `keepstate serve` for the tests, started as the Python suite's `tests/serverproc.py` does:
 * the repository's keepstate command (`KEEPSTATE_BIN`, default `../../.venv/bin/keepstate`), a
 * random admin key, a free port, a fresh SQLite file in a temp dir; ready once `/readyz` is 200.
 * `stop()` sends SIGTERM and waits (SIGKILL only when it does not stop in time).
 */

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The package's folder (this file is compiled to `build/support/`). */
export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const REPO_ROOT = resolve(PACKAGE_ROOT, "../..");
export const KEEPSTATE_BIN = resolve(PACKAGE_ROOT, process.env["KEEPSTATE_BIN"] ?? "../../.venv/bin/keepstate");
const START_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 15_000;

export interface Server {
  url: string;
  adminKey: string;
  process: ChildProcess;
  /** A new key of `role`, made with the admin key. */
  makeKey(role: "admin" | "member" | "worker"): Promise<string>;
  log(): string;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const address = probe.address();
      probe.close(() => (typeof address === "object" && address ? done(address.port) : fail(new Error("no port"))));
    });
  });
}

export function sleepMs(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}

/** Resolves with the exit code once `child` exits (at once when it has already). */
export function exited(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((done) => child.once("exit", (code) => done(code)));
}

/** SIGTERM, wait; SIGKILL when it does not stop within `timeoutMs`. */
export async function terminate(child: ChildProcess, timeoutMs = STOP_TIMEOUT_MS): Promise<number | null> {
  const exit = exited(child);
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  try {
    return await exit;
  } finally {
    clearTimeout(timer);
  }
}

async function waitReady(url: string, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`keepstate serve exited with ${child.exitCode}:\n${log().slice(-4000)}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await sleepMs(50);
  }
  throw new Error(`keepstate serve did not become ready:\n${log().slice(-4000)}`);
}

/** Options of `startServer`. */
export interface ServerOptions {
  /** Its `--invocation-lease` in seconds; default 30. */
  lease?: number;
  /** Its store; default a fresh SQLite file in a temporary folder. */
  store?: string;
  /** Its bootstrap admin key (servers sharing a store share one); default a fresh one. */
  adminKey?: string;
  /** An embedder spec of the repository's tests (tests/meaning.py), for search by meaning. */
  embedder?: string;
  /** Its port (a server started again where its clients know it); default a free one. */
  port?: number;
}

/** Start `keepstate serve` over its store (a fresh SQLite file unless `store` says otherwise). */
export async function startServer(options: ServerOptions = {}): Promise<Server> {
  if (!existsSync(KEEPSTATE_BIN)) {
    throw new Error(`no keepstate command at ${KEEPSTATE_BIN}: run make install, or set KEEPSTATE_BIN`);
  }
  const dir = mkdtempSync(join(tmpdir(), "keepstate-ts-"));
  const adminKey = options.adminKey ?? `ks_test_${randomBytes(24).toString("base64url")}`;
  const port = options.port ?? (await freePort());
  const store = options.store ?? `sqlite:///${join(dir, "server.db")}`;
  const args = ["serve", "--store", store, "--host", "127.0.0.1",
    "--port", String(port), "--invocation-lease", String(options.lease ?? 30),
    ...(options.embedder === undefined ? [] : ["--embedder", options.embedder])];
  const pythonPath = [resolve(REPO_ROOT, "tests"), process.env["PYTHONPATH"]].filter(Boolean).join(":");
  const logPath = join(dir, "serve.log");
  const out = openSync(logPath, "w");
  const child = spawn(KEEPSTATE_BIN, args, {
    env: { ...process.env, KEEPSTATE_ADMIN_KEY: adminKey, PYTHONUNBUFFERED: "1", PYTHONPATH: pythonPath },
    stdio: ["ignore", out, out],
  });
  closeSync(out);
  const log = () => (existsSync(logPath) ? readFileSync(logPath, "utf8") : "");
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, child, log);
  } catch (error) {
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url, adminKey, process: child, log,
    makeKey: async (role) => {
      const answer = await fetch(`${url}/v0/keys`, {
        method: "POST", headers: { authorization: `Bearer ${adminKey}`, "content-type": "application/json" },
        body: JSON.stringify({ role }),
      });
      if (answer.status !== 201) throw new Error(`key not created: ${answer.status} ${await answer.text()}`);
      return ((await answer.json()) as { key: string }).key;
    },
    stop: async () => {
      await terminate(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A fresh agent name, so tests sharing a server never claim each other's runs. */
export function agentName(prefix = "agent"): string {
  return `${prefix}-${randomBytes(5).toString("hex")}`;
}

/** Every item of an async iterable, in order. */
export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}
