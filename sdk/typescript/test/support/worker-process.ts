/**
 * A worker in a process of its own, for the tests that need several processes or kill one:
 * `node worker-process.js MODE AGENT`, with `KEEPSTATE_URL` and `KEEPSTATE_KEY` set. It prints
 * `ready` once it runs, stops gracefully on SIGTERM (as documented: `worker.stop()`), and prints
 * how many invocations it handled.
 *
 * Modes: `counter` (input `{times}`: that many `update` increments of the agent-scope key `n`;
 * input `"read"`: the value of `n`), `sleeper` (sleeps a minute), `chat` (the seed's chat agent).
 */

import { type Invocation, Worker } from "keepstate";
import { seedChatWorker } from "./seed-chat.js";

const [mode, agent = "agent"] = process.argv.slice(2);

async function counter(inv: Invocation): Promise<unknown> {
  if (inv.input === "read") return inv.state.agent.get("n", 0);
  const started = Date.now();
  let calls = 0;
  for (let n = 0; n < inv.input.times; n++) {
    await inv.state.agent.update<number>("n", (value) => (calls++, value + 1), { default: 0 });
  }
  return { calls, pid: process.pid, started, ended: Date.now() };
}

async function sleeper(): Promise<string> {
  await new Promise((done) => setTimeout(done, 60_000));
  return "woke up";
}

function build(): Worker {
  if (mode === "chat") return seedChatWorker(process.env["KEEPSTATE_URL"] ?? "", process.env["KEEPSTATE_KEY"] ?? "");
  const worker = new Worker(undefined, { claimWait: 1 });
  if (mode === "counter") return worker.agent(agent, counter);
  if (mode === "sleeper") return worker.agent(agent, sleeper);
  throw new Error(`unknown mode ${mode}`);
}

const worker = build();
process.on("SIGTERM", () => void worker.stop());
const running = worker.run();
process.stdout.write("ready\n");
const handled = await running;
process.stdout.write(`stopped after ${handled}\n`);
