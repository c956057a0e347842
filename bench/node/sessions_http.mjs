// The Node.js side of bench/bench_sessions_http.py: session-store calls through the TypeScript SDK
// against a running keepstate server, as calls per second, printed as one JSON line.
//
//   node sessions_http.mjs SDK_INDEX URL KEY SPACE SECONDS CONCURRENCY...
//
// For each concurrency C: `transact` (lease, get, fenced set, release: four requests), a plain
// `set` (one request) and a caller state PUT (one request), C loops at once, each on its own session.

import { pathToFileURL } from "node:url";

const [sdkIndex, url, key, space, seconds, ...concurrency] = process.argv.slice(2);
const { Client, SessionStore } = await import(pathToFileURL(sdkIndex).href);
const store = new SessionStore(url, { key, space });
const client = new Client(url, { key });
const base = {
  state: { step: 1, items: Array.from({ length: 20 }, (_, n) => n) },
  history: [{ role: "user", content: "book a table for two at eight" }],
  configHash: "bench", messageCount: 1, phase: "idle",
};

async function rate(tasks, call) {
  let done = 0;
  const stop = performance.now() + Number(seconds) * 1000;
  const started = performance.now();
  await Promise.all(Array.from({ length: tasks }, async (_, n) => {
    while (performance.now() < stop) {
      await call(n);
      done += 1;
    }
  }));
  return done / ((performance.now() - started) / 1000);
}

const calls = {
  transact: (n) => store.transact(`s-${n}`, async () => {
    const current = (await store.get(`s-${n}`)) ?? structuredClone(base);
    current.state.step += 1;
    await store.set(`s-${n}`, current);
  }),
  set: (n) => store.set(`s-${n}`, { ...base, state: { ...base.state, step: n } }),
  statePut: (n) => client.state.session(`bench-${n}`, "bench").put("working", { ...base, state: { ...base.state, step: n } }),
};

const most = Math.max(...concurrency.map(Number));
for (let n = 0; n < most; n++) {
  await client.sessions.create({ id: `bench-${n}` });
  await calls.transact(n); // connections made, rows there, before timing
  await calls.statePut(n);
}
const results = {};
for (const tasks of concurrency.map(Number)) {
  for (const [name, call] of Object.entries(calls)) results[`${name}_${tasks}`] = await rate(tasks, call);
}
process.stdout.write(`${JSON.stringify(results)}\n`);
