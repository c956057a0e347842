/**
 * A runtime instance in a process of its own, for the session-store tests that need several
 * processes, pause one (SIGSTOP) or kill one: `node session-runtime.js`, with `KEEPSTATE_URL`,
 * `KEEPSTATE_KEY`, `SPACE`, `LEASE_MS` and `LEDGER` (the booking API's record of its effects: one
 * JSON line per booking) set. Commands come one per line on stdin; each answer is one JSON line on
 * stdout, after a first `{"ready": true}`:
 *
 *   confirm N SID...     N concurrent confirmations of each session → {done, booked, nothing, errors}
 *   hold SID             inside SID's transaction, print {inside}, wait for `continue SID`, write, end
 *   try SID WAIT_MS      one transaction writing SID, waiting at most WAIT_MS for it → {done, outcome}
 */

import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { KeepstateError, SessionStore } from "keepstate";
import { AgentRuntime, freshState } from "./agento.js";

const options = { space: process.env["SPACE"] ?? "booking", leaseMs: Number(process.env["LEASE_MS"] ?? 15_000) };
const store = new SessionStore(undefined, options);
const runtime = new AgentRuntime({ sessionStore: store });
const continues = new Map<string, () => void>();

function say(answer: unknown): void {
  process.stdout.write(`${JSON.stringify(answer)}\n`);
}

function outcome(error: unknown): string {
  return error instanceof KeepstateError ? error.code : String(error);
}

/** The booking API: an effect outside the store, recorded in the ledger. */
async function book(item: string): Promise<string> {
  await new Promise((done) => setTimeout(done, 5));
  appendFileSync(process.env["LEDGER"] ?? "/dev/null", `${JSON.stringify({ item, pid: process.pid })}\n`);
  return `${item}@${process.pid}`;
}

async function confirm(times: number, sids: string[]): Promise<void> {
  const counts = { done: "confirm", booked: 0, nothing: 0, errors: [] as string[] };
  await Promise.all(sids.flatMap((sid) => Array.from({ length: times }, async () => {
    try {
      counts[await runtime.confirm(sid, book)] += 1;
    } catch (error) {
      counts.errors.push(outcome(error));
    }
  })));
  say(counts);
}

async function hold(sid: string): Promise<void> {
  try {
    const done = await store.transact(sid, async () => {
      const resumed = new Promise<void>((resume) => continues.set(sid, resume));
      say({ inside: sid });
      await resumed;
      await store.set(sid, { ...freshState(null), state: { by: `hold-${process.pid}` } });
      return "wrote";
    });
    say({ done: "hold", sid, outcome: done });
  } catch (error) {
    say({ done: "hold", sid, outcome: outcome(error) });
  }
}

async function attempt(sid: string, waitMs: number): Promise<void> {
  const other = new SessionStore(undefined, { ...options, waitMs });
  try {
    const done = await other.transact(sid, async () => {
      await other.set(sid, { ...freshState(null), state: { by: `try-${process.pid}` } });
      return "wrote";
    });
    say({ done: "try", sid, outcome: done });
  } catch (error) {
    say({ done: "try", sid, outcome: outcome(error) });
  }
}

createInterface({ input: process.stdin }).on("line", (line) => {
  const [command, ...args] = line.trim().split(/\s+/);
  if (command === "confirm") void confirm(Number(args[0]), args.slice(1));
  else if (command === "hold") void hold(args[0] ?? "");
  else if (command === "continue") continues.get(args[0] ?? "")?.();
  else if (command === "try") void attempt(args[0] ?? "", Number(args[1]));
});
await store.get("warm-up"); // connected before the first command
say({ ready: true });
