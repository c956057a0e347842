/**
 * `insideRun(body)`: run `body` as the agent of one real run and hand back what it returned or threw,
 * so a test can call `inv.state...` with a live run token and assert on the outcome directly.
 */

import { Client, type Invocation, Worker } from "keepstate";
import { agentName, type Server } from "./server.js";

export interface RunPlace {
  sessionId?: string;
}

export class Inside {
  readonly client: Client;

  private constructor(
    private readonly server: Server,
    readonly memberKey: string,
    readonly workerKey: string,
  ) {
    this.client = new Client(server.url, { key: memberKey });
  }

  static async create(server: Server): Promise<Inside> {
    return new Inside(server, await server.makeKey("member"), await server.makeKey("worker"));
  }

  /** Start a run of a fresh agent (or `agent`) and run `body` as that agent; its result, or its throw. */
  async run<T>(body: (inv: Invocation) => Promise<T>, place: RunPlace & { agent?: string } = {}): Promise<T> {
    const agent = place.agent ?? agentName("inside");
    let outcome: { value: T } | { error: unknown } | undefined;
    const worker = new Worker(this.server.url, { key: this.workerKey, claimWait: 1 });
    worker.agent(agent, async (inv) => {
      try {
        outcome = { value: await body(inv) };
      } catch (error) {
        outcome = { error };
      }
      return null;
    });
    await this.client.runs.start(agent, null, { sessionId: place.sessionId });
    await worker.run({ stopAfter: 1 });
    if (outcome === undefined) throw new Error("the run was not executed");
    if ("error" in outcome) throw outcome.error;
    return outcome.value;
  }
}
