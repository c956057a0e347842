/**
 * What an agent function receives: an `Invocation`, one execution of a run (its start, or its
 * resume after a person's decision), with the run's facts, its four state scopes, its agent's
 * memory and its run token.
 *
 * `hold(request)` throws a `HoldRequested`, which the worker catches and turns into a held run. It
 * is deliberately not an `Error`, so an agent's `catch (e) { if (e instanceof Error) ... }` does not
 * take it for a failure (the Python SDK's `HoldRequested` is a `BaseException` for the same reason);
 * a bare `catch` that swallows everything must rethrow it: `if (e instanceof HoldRequested) throw e`.
 */

import { Batch } from "./batch.js";
import * as calls from "./calls.js";
import type { EventItem, Multitask } from "./calls.js";
import { Memory } from "./memory.js";
import type { Claim, Decision, Run } from "./records.js";
import { Scope } from "./scope.js";
import type { ScopeName } from "./state-calls.js";
import { runTokenTarget } from "./state-calls.js";
import type { Sender } from "./transport.js";

/** Thrown by `inv.hold(request)`: the invocation ends and its run is held with `request`. */
export class HoldRequested {
  readonly message = "the agent asked to hold its run for a decision";

  constructor(readonly request: unknown) {}
}

/** `inv.state`: the four scopes of a run, and atomic batches across them. */
export class InvocationState {
  /** Every invocation of this run: its start and each resume. */
  readonly run: Scope;
  /** Every run of the run's session, for this agent (`NoSession` without one). */
  readonly session: Scope;
  /** Every run of this agent. */
  readonly agent: Scope;
  /** Every run of the run's end user, for this agent (`NoUser` without one). */
  readonly user: Scope;

  constructor(
    private readonly sender: Sender,
    private readonly token: string,
  ) {
    const scope = (name: ScopeName) => new Scope(sender, runTokenTarget(name, token));
    this.run = scope("run");
    this.session = scope("session");
    this.agent = scope("agent");
    this.user = scope("user");
  }

  /** A new batch: add ops (`put`, `delete`, `append`, `incr`, `patch`, `trim`), then `commit()`. */
  batch(): Batch {
    return new Batch(this.sender, this.token);
  }
}

/** What heartbeats (and emits) learn about an invocation while it runs. */
export interface LeaseStatus {
  cancelRequested: boolean;
  lost: boolean;
}

/**
 * Mirror a heartbeat's or an emit's `cancel_requested` onto the lease: once true it stays true (a cancel
 * is never withdrawn, and an older heartbeat's answer arriving late must not hide a newer one).
 */
export function sawCancel(lease: LeaseStatus, requested: boolean): void {
  lease.cancelRequested ||= requested;
}

export class Invocation {
  /** The invocation's id (one run has one per start and resume). */
  readonly id: string;
  /** The run's input. */
  readonly input: any;
  readonly runId: string;
  readonly agent: string;
  readonly sessionId: string | null;
  /** The session's end user; a child run keeps its parent's. */
  readonly user: string | null;
  readonly parentId: string | null;
  /** `"start"`, or `"resume"` after a decision. */
  readonly kind: "start" | "resume";
  /** On a resume, the person's answer `{approved, data}`; else null. */
  readonly decision: Decision | null;
  readonly state: InvocationState;
  /** The agent's memory as this run's end user sees it: `users/{user}/...` is that user's folder. */
  readonly memory: Memory;
  private readonly token: string;

  constructor(
    private readonly claimed: Claim,
    private readonly sender: Sender,
    private readonly lease: LeaseStatus = { cancelRequested: false, lost: false },
  ) {
    this.id = claimed.id;
    this.input = claimed.input;
    this.runId = claimed.runId;
    this.agent = claimed.agent;
    this.sessionId = claimed.sessionId;
    this.user = claimed.user;
    this.parentId = claimed.parentId;
    this.kind = claimed.kind;
    this.decision = claimed.decision;
    this.state = new InvocationState(sender, claimed.token);
    this.memory = new Memory(sender, claimed.token);
    this.token = claimed.token;
  }

  /** True once a caller asked to cancel the run (seen at the next heartbeat); stopping is up to the agent. */
  get cancelRequested(): boolean {
    return this.lease.cancelRequested;
  }

  /** True when a heartbeat was refused: the lease ran out and the result will be refused too. */
  get leaseLost(): boolean {
    return this.lease.lost;
  }

  /** End this invocation with the run held for a decision on `request`. Save progress in `state.run` first. */
  hold(request?: unknown): never {
    throw new HoldRequested(request);
  }

  /**
   * Append one event to the run's log (what a caller reads with `client.runs.stream`); resolves to its
   * seq. `type`: 1–64 of `a-z 0-9 . _ -`, default `message`; `data`: any JSON value up to 64 KiB. Its
   * answer refreshes `cancelRequested`, as a heartbeat's does.
   */
  emit(data: unknown, options: { type?: string } = {}): Promise<number> {
    return this.emitMany([{ type: options.type, data }]);
  }

  /** Append `events` (`{type?, data}` each) in one call, all or none; resolves to the seq of the last. At most 100. */
  async emitMany(events: EventItem[]): Promise<number> {
    const answer = await this.sender.send(calls.emit(this.claimed, events));
    sawCancel(this.lease, answer.cancelRequested);
    return answer.seq;
  }

  /** Start a child run of `agent`: its `parentId` is this run and its `user` this run's. */
  startRun(agent: string, input?: unknown, options: { sessionId?: string; multitask?: Multitask } = {}): Promise<Run> {
    const { sessionId, multitask } = options;
    return this.sender.send(calls.startRun(agent, input, { sessionId, multitask }, this.token));
  }
}
