/**
 * The seed's TypeScript agent (spec typescript-sdk.md, seed page 001): the body of
 * `register({...})` below is the seed's example, unchanged. Used in-process by the tests and as a
 * worker process (`worker-process.ts chat`).
 */

import { Worker, type Invocation } from "keepstate";

export function seedChatWorker(url: string, key: string): Worker {
  const worker = new Worker(url, { key, claimWait: 1 });
  worker.register({
    async chat(inv) {
      const message: string = inv.input.message;
      const history = await inv.state.session.append("history", [{ role: "user", content: message }]);
      const reply = `turn ${Math.floor((history.length + 1) / 2)}: you said '${message}'`;
      await inv.state.session.append("history", [{ role: "assistant", content: reply }]);

      const visits = await inv.state.agent.update<number>("visits", (n) => n + 1, { default: 0 });
      return { reply, visits };
    },
  });
  return worker;
}

/** The type the seed imports, so the import above is the seed's too. */
export type SeedInvocation = Invocation;
