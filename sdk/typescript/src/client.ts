/**
 * `Client`: the caller's side of the HTTP API — sessions, runs (and their events), keys, agents, and state read and
 * written with the client's key ("State for callers").
 *
 * Only calls live here: each request is described in `calls.ts` / `state-calls.ts` and sent by one
 * `Sender`, which owns timeouts, retries and errors. Listings are async iterators that follow the
 * server's `next` cursor, as the Python SDK's iterators do.
 */

import * as calls from "./calls.js";
import type { ForkFields, RunFilter, SessionFields, StartOptions } from "./calls.js";
import type { StreamOptions } from "./events.js";
import { EventStream } from "./events.js";
import type { AgentInfo, Decision, EventPage, Key, Page, Run, Session } from "./records.js";
import { isFinished } from "./records.js";
import { Scope } from "./scope.js";
import { callerTarget } from "./state-calls.js";
import type { ConnectionOptions } from "./transport.js";
import { buildConfig, segment, Sender } from "./transport.js";
import { checkKey } from "./values.js";

export type ClientOptions = ConnectionOptions;

/** Pages `fetch(after, limit)` into one stream of items; at most `limit` of them when given. */
async function* paged<T>(
  fetch: (after: string | undefined, limit: number | undefined) => Promise<Page<T>>,
  after: string | undefined, limit: number | undefined,
): AsyncGenerator<T, void, undefined> {
  let remaining = limit;
  while (remaining === undefined || remaining > 0) {
    const page = await fetch(after, remaining);
    const items = remaining === undefined ? page.items : page.items.slice(0, remaining);
    yield* items;
    if (remaining !== undefined) remaining -= items.length;
    if (page.next === null || page.items.length === 0) return;
    after = page.next;
  }
}

interface Listing {
  after?: string;
  /** The most items to yield (all when absent). */
  limit?: number;
}

/** `client.sessions`: the conversations this key owns (an admin's: all of its environment). */
export class Sessions {
  constructor(private readonly sender: Sender) {}

  /** Create a session; the same `id` again by its owner answers the existing one. */
  create(fields: SessionFields = {}): Promise<Session> {
    return this.sender.send(calls.createSession(fields));
  }

  /**
   * A new session of this key, `parent` the source, holding a copy of the source's session-scope state
   * (every agent's) as of one instant; each list named in `lists` (`{"AGENT/KEY": N}`) is cut to its first
   * N items there. `user` defaults to the source's. `NotAList` (and no session) when a named key holds
   * another value; `NotFound` for a session this key may not see.
   */
  fork(id: string, fields: ForkFields = {}): Promise<Session> {
    return this.sender.send(calls.forkSession(id, fields));
  }

  /** The session; `NotFound` also for one this key may not see. */
  get(id: string): Promise<Session> {
    return this.sender.send(calls.getSession(id));
  }

  /** Sessions oldest first, page by page. */
  list(options: Listing & { user?: string } = {}): AsyncGenerator<Session, void, undefined> {
    const fetch = (after: string | undefined, limit: number | undefined) =>
      this.sender.send(calls.listSessions(options.user, after, limit));
    return paged(fetch, options.after, options.limit);
  }

  /** Replace the session's metadata. */
  update(id: string, fields: { metadata: unknown }): Promise<Session> {
    return this.sender.send(calls.updateSession(id, fields.metadata));
  }

  /** Delete the session and its session-scope state; `SessionBusy` while a run of it is queued or running. */
  delete(id: string): Promise<void> {
    return this.sender.send(calls.deleteSession(id));
  }
}

/** `client.runs`: start turns, wait for them, decide held ones, cancel. */
export class Runs {
  constructor(private readonly sender: Sender) {}

  /** Queue a run of `agent`. `SessionBusy` while another turn of the session is queued or running. */
  start(agent: string, input?: unknown, options: StartOptions = {}): Promise<Run> {
    return this.sender.send(calls.startRun(agent, input, options));
  }

  get(id: string): Promise<Run> {
    return this.sender.send(calls.getRun(id));
  }

  /** The run once it is no longer queued or running, or as it is when `timeout` seconds (default 30) pass. */
  async wait(id: string, options: { timeout?: number } = {}): Promise<Run> {
    const deadline = Date.now() + (options.timeout ?? 30) * 1000;
    let run = await this.sender.send(calls.getRun(id, (deadline - Date.now()) / 1000));
    while (!isFinished(run) && deadline - Date.now() > 0) {
      run = await this.sender.send(calls.getRun(id, (deadline - Date.now()) / 1000));
    }
    return run;
  }

  /** Runs oldest first, page by page. */
  list(options: Listing & RunFilter = {}): AsyncGenerator<Run, void, undefined> {
    const fetch = (after: string | undefined, limit: number | undefined) =>
      this.sender.send(calls.listRuns(options, after, limit));
    return paged(fetch, options.after, options.limit);
  }

  /** Answer a held run (`{approved, data?}`); it is queued again for its resume. `NotHeld` when not held. */
  decide(id: string, decision: { approved: boolean; data?: Decision["data"] }): Promise<Run> {
    return this.sender.send(calls.decide(id, decision));
  }

  /** Cancel: a queued or held run now; a running one sees `cancelRequested` at its next heartbeat. */
  cancel(id: string): Promise<Run> {
    return this.sender.send(calls.cancelRun(id));
  }

  /**
   * A page of the run's events with a seq past `after` (default 0), oldest first; `next` is the `after`
   * of the next page (null on the last). `NotFound` for a run this key may not see.
   */
  events(id: string, options: { after?: number; limit?: number } = {}): Promise<EventPage> {
    return this.sender.send(calls.runEvents(id, options.after ?? 0, options.limit));
  }

  /**
   * The run's events past `after` as they are written, each once and in seq order, until the run has
   * ended (a held run's stream waits through the hold): `for await (const event of client.runs.stream(id))`.
   * A dropped connection is made again from the last seq yielded; `close()` (or leaving the loop) closes it.
   */
  stream(id: string, options: StreamOptions = {}): EventStream {
    return new EventStream(this.sender, id, options);
  }
}

/** `client.keys` (admin): the keys of the environment. */
export class Keys {
  constructor(private readonly sender: Sender) {}

  /** A new key of `role` (`admin`, `member`, `worker`); its secret is in `.key`, shown only now. */
  create(role: string, options: { name?: string } = {}): Promise<Key> {
    return this.sender.send(calls.createKey(role, options.name));
  }

  list(): Promise<Key[]> {
    return this.sender.send(calls.listKeys());
  }

  /** Revoke a key: it is `Unauthorized` from then on. */
  revoke(id: string): Promise<void> {
    return this.sender.send(calls.revokeKey(id));
  }
}

/** `client.agents`: the agents of the environment and their queues. */
export class Agents {
  constructor(private readonly sender: Sender) {}

  list(): Promise<AgentInfo[]> {
    return this.sender.send(calls.listAgents());
  }
}

/** `client.state`: the scopes of state, reached with the client's key instead of a run token. */
export class CallerState {
  constructor(private readonly sender: Sender) {}

  /** The session scope of `agent` in session `id` (its owner, an admin). */
  session(id: string, agent: string): Scope {
    return this.scope(`/v0/sessions/${segment(id)}/state/${segment(checkKey(agent, "agent"))}/`);
  }

  /** The run scope of run `runId` (its owner, an admin). */
  run(runId: string): Scope {
    return this.scope(`/v0/runs/${segment(runId)}/state/`);
  }

  /** The agent scope of `agent` (admin). */
  agent(agent: string): Scope {
    return this.scope(`/v0/agents/${segment(checkKey(agent, "agent"))}/state/`);
  }

  /** The user scope of end user `user` for `agent` (admin). */
  user(user: string, agent: string): Scope {
    return this.scope(`/v0/users/${segment(checkKey(user, "user"))}/state/${segment(checkKey(agent, "agent"))}/`);
  }

  private scope(prefix: string): Scope {
    return new Scope(this.sender, callerTarget(prefix));
  }
}

/** The caller's side of the HTTP API. `url` and `key` default to `KEEPSTATE_URL` and `KEEPSTATE_KEY`. */
export class Client {
  readonly sessions: Sessions;
  readonly runs: Runs;
  readonly keys: Keys;
  readonly agents: Agents;
  readonly state: CallerState;
  private readonly sender: Sender;

  constructor(url?: string, options: ClientOptions = {}) {
    this.sender = new Sender(buildConfig(url, options));
    this.sessions = new Sessions(this.sender);
    this.runs = new Runs(this.sender);
    this.keys = new Keys(this.sender);
    this.agents = new Agents(this.sender);
    this.state = new CallerState(this.sender);
  }

  get baseUrl(): string {
    return this.sender.config.baseUrl;
  }
}
