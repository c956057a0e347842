/**
 * `Worker`: runs agent functions for a server, `concurrency` invocations at a time.
 *
 * Each of `concurrency` loops long-polls `POST /v0/invocations/claim`, runs the agent with an
 * `Invocation`, heartbeats in the background every third of the lease (which also brings
 * `cancelRequested`, as the agent's emits do), then completes, fails or holds — as the Python SDK's workers do, with async
 * loops on one event loop instead of threads. `stop()` lets every invocation in flight finish and
 * report; an idle loop ends when its current claim poll ends (a claim poll is never abandoned
 * midway: its answer could be an invocation nobody would run until its lease ran out). A revoked or
 * wrong-role key stops `run()`, which rejects with it; other claim errors are retried with backoff.
 *
 * Signals are the program's choice: `process.on("SIGTERM", () => worker.stop())`.
 */

import * as calls from "./calls.js";
import { KeepstateError, Unauthorized } from "./errors.js";
import type { LeaseStatus } from "./invocation.js";
import { HoldRequested, Invocation, sawCancel } from "./invocation.js";
import type { Claim } from "./records.js";
import type { Call, ConnectionOptions } from "./transport.js";
import { backoff, buildConfig, Sender } from "./transport.js";
import { checkKey, encodeSized } from "./values.js";

export const DEFAULT_CLAIM_WAIT = 10;
/** Claim errors that no amount of waiting fixes: the worker stops and `run()` rejects with them. */
const FATAL = new Set(["unauthorized", "forbidden"]);

/** An agent: gets an invocation; what it returns (or resolves to) is the run's output. */
export type Agent = (inv: Invocation) => unknown;

export interface Logger {
  warn(message: string): void;
  info?(message: string): void;
}

export interface WorkerOptions extends ConnectionOptions {
  /** Invocations run at the same time; default 1. */
  concurrency?: number;
  /** Seconds one claim long-poll waits (≤ 30), also the longest `stop()` waits for an idle loop; default 10. */
  claimWait?: number;
  /** Where warnings go; default `console.warn`. */
  logger?: Logger;
}

export interface RunOptions {
  /** Return after this many invocations were handled. */
  stopAfter?: number;
  /** Overrides the constructor's `concurrency` for this run. */
  concurrency?: number;
}

/** How many more invocations a `run` may claim (undefined: no limit), and how many it took. */
class Budget {
  used = 0;

  constructor(private left: number | undefined) {}

  take(): boolean {
    if (this.left !== undefined && this.left <= 0) return false;
    if (this.left !== undefined) this.left--;
    this.used++;
    return true;
  }

  giveBack(): void {
    if (this.left !== undefined) this.left++;
    this.used--;
  }
}

function checkConcurrency(value: number): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError("concurrency must be an integer of at least 1");
  return value;
}

/** `{type, message}` for a failed run: an Error's name and message, else the thrown value as text. */
export function describeError(error: unknown): { type: string; message: string } {
  const wellFormed = (text: string) =>
    text.replace(/\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
  if (error instanceof Error) {
    const type = error.name || "Error";
    return { type: wellFormed(type), message: wellFormed(error.message || type) };
  }
  return { type: "Error", message: wellFormed(textOf(error)) };
}

/** `String(value)`, even for a value whose conversion throws (`Object.create(null)`). */
function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** The call that ends `claimed`: hold on `HoldRequested`, fail on any other throw, else complete. */
export function outcomeCall(claimed: Claim, result: unknown, thrown?: { error: unknown }): Call<void> {
  try {
    if (thrown?.error instanceof HoldRequested) return calls.hold(claimed, encodeSized(thrown.error.request ?? null, "hold request"));
    if (thrown) {
      const { type, message } = describeError(thrown.error);
      return calls.fail(claimed, type, message);
    }
    return calls.complete(claimed, encodeSized(result ?? null, "the agent's output"));
  } catch (bad) {
    const { type, message } = describeError(bad);
    return calls.fail(claimed, type, `not storable: ${message}`);
  }
}

/** Keeps one invocation's lease alive and mirrors `cancelRequested` onto it. */
class Heartbeats {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;

  constructor(
    private readonly sender: Sender,
    private readonly claimed: Claim,
    private readonly lease: LeaseStatus,
    private readonly logger: Logger,
  ) {
    this.schedule(claimed.leaseSeconds / 3);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private schedule(seconds: number): void {
    if (!this.stopped) this.timer = setTimeout(() => void this.beat(seconds), Math.max(0.05, seconds) * 1000);
  }

  private async beat(interval: number): Promise<void> {
    try {
      const answer = await this.sender.send(calls.heartbeat(this.claimed));
      sawCancel(this.lease, answer.cancelRequested);
      this.schedule(answer.leaseSeconds / 3);
    } catch (error) {
      if (this.stopped) return;
      if (error instanceof Unauthorized) {
        this.lease.lost = true;
        this.logger.warn(`keepstate: lease lost for run ${this.claimed.runId}: its result will be refused`);
        return;
      }
      this.logger.warn(`keepstate: heartbeat for run ${this.claimed.runId} failed: ${describeError(error).message}`);
      this.schedule(interval);
    }
  }
}

export class Worker {
  private readonly sender: Sender;
  private readonly functions = new Map<string, Agent>();
  private readonly concurrency: number;
  private readonly claimWait: number;
  private readonly logger: Logger;
  private stopping = false;
  private fatal: KeepstateError | undefined;
  private active: Promise<void> | undefined;
  private readonly wakers = new Set<() => void>();

  /** `url` and `options.key` (a worker key) default to `KEEPSTATE_URL` and `KEEPSTATE_KEY`. */
  constructor(url?: string, options: WorkerOptions = {}) {
    this.sender = new Sender(buildConfig(url, options));
    this.concurrency = checkConcurrency(options.concurrency ?? 1);
    this.claimWait = options.claimWait ?? DEFAULT_CLAIM_WAIT;
    if (!(this.claimWait >= 0 && this.claimWait <= calls.MAX_CLAIM_WAIT)) throw new RangeError("claimWait must be 0-30 seconds");
    this.logger = options.logger ?? { warn: (message) => console.warn(message) };
  }

  /** Register `fn` as agent `name`. */
  agent(name: string, fn: Agent): this {
    checkKey(name, "agent name");
    if (typeof fn !== "function") throw new TypeError(`agent ${name}: expected a function`);
    this.functions.set(name, fn);
    return this;
  }

  /** Register every method of `agents` under its own name (`register({ async chat(inv) {...} })`). */
  register(agents: { [name: string]: Agent }): this {
    for (const name of methodNames(agents)) {
      const method = (agents as Record<string, Agent>)[name] as Agent;
      this.agent(name, (inv) => method.call(agents, inv));
    }
    return this;
  }

  /** The names of the registered agents, sorted. */
  get agents(): string[] {
    return [...this.functions.keys()].sort();
  }

  /** Claim and run invocations until `stop()` (or `stopAfter` were handled); resolves to how many. */
  async run(options: RunOptions = {}): Promise<number> {
    if (this.active) throw new Error("this worker is already running");
    const agents = this.agents;
    if (agents.length === 0) throw new Error("no agents registered: use worker.agent(name, fn) or worker.register({...})");
    const loops = checkConcurrency(options.concurrency ?? this.concurrency);
    const budget = new Budget(options.stopAfter);
    this.stopping = false;
    this.fatal = undefined;
    const done = Promise.all(Array.from({ length: loops }, () => this.loop(agents, budget)));
    this.active = done.then(() => undefined);
    try {
      await done;
    } finally {
      this.active = undefined;
    }
    if (this.fatal) throw this.fatal;
    return budget.used;
  }

  /** Ask `run()` to return once the invocations in flight are finished; resolves when it has. */
  stop(): Promise<void> {
    this.stopping = true;
    for (const wake of this.wakers) wake();
    return this.active ?? Promise.resolve();
  }

  private async loop(agents: string[], budget: Budget): Promise<void> {
    let failures = 0;
    while (!this.stopping && budget.take()) {
      let claimed: Claim | null;
      try {
        claimed = await this.sender.send(calls.claim(agents, this.claimWait));
      } catch (error) {
        budget.giveBack();
        if (error instanceof KeepstateError && FATAL.has(error.code)) {
          this.fatal ??= error;
          void this.stop();
          return;
        }
        this.logger.warn(`keepstate: claim failed, retrying: ${describeError(error).message}`);
        await this.pause(backoff(Math.min(failures++, 6)) * 5);
        continue;
      }
      failures = 0;
      if (claimed === null) budget.giveBack();
      else await this.execute(claimed);
    }
  }

  private async execute(claimed: Claim): Promise<void> {
    const lease: LeaseStatus = { cancelRequested: false, lost: false };
    const inv = new Invocation(claimed, this.sender, lease);
    const fn = this.functions.get(claimed.agent);
    const beats = new Heartbeats(this.sender, claimed, lease, this.logger);
    let result: unknown;
    let thrown: { error: unknown } | undefined;
    try {
      if (!fn) throw new Error(`this worker has no agent ${JSON.stringify(claimed.agent)}`);
      result = await fn(inv);
    } catch (error) {
      thrown = { error };
      if (!(error instanceof HoldRequested)) this.logger.warn(`keepstate: agent ${claimed.agent} threw: ${stackOf(error)}`);
    } finally {
      beats.stop();
    }
    await this.report(claimed, outcomeCall(claimed, result, thrown));
  }

  private async report(claimed: Claim, call: Call<void>): Promise<void> {
    const what = `${claimed.kind} of run ${claimed.runId} (${claimed.agent})`;
    try {
      await this.sender.send(call);
      this.logger.info?.(`keepstate: ${what}: ${call.path.slice(call.path.lastIndexOf("/") + 1)}`);
    } catch (error) {
      this.logger.warn(`keepstate: could not report the ${what}: ${describeError(error).message}`);
    }
  }

  /** Wait `seconds`, or less when `stop()` is called. */
  private pause(seconds: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, seconds * 1000);
      this.wakers.add(wake);
    });
  }
}

/** The methods of an object: its own functions and those of its class (not `Object`'s, not `constructor`). */
function methodNames(target: object): string[] {
  const names = new Set<string>();
  for (let proto: object | null = target; proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const name of Object.getOwnPropertyNames(proto)) {
      if (name !== "constructor" && typeof (target as Record<string, unknown>)[name] === "function") names.add(name);
    }
  }
  if (names.size === 0) throw new TypeError("register(object): the object has no methods");
  return [...names];
}

function stackOf(error: unknown): string {
  return error instanceof Error ? (error.stack ?? `${error.name}: ${error.message}`) : textOf(error);
}
