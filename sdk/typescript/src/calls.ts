/**
 * Every request outside the state routes as a `Call`: keys, sessions, runs, agents, invocations.
 *
 * Each says whether repeating it is safe (see `transport.ts`): reads; a heartbeat; session creation
 * with an explicit id (the same id again answers the existing session), and so a fork with one; and
 * the writes the HTTP API makes idempotent — starting a run, a decision, a cancel, an invocation's
 * outcome and its events — each `idempotent`, carrying a fresh `Idempotency-Key`, so a lost answer
 * is retried and the write still lands once. A claim is never repeated: a claim whose answer was lost
 * would be held by nobody until its lease ran out.
 */

import type { AgentInfo, Claim, Decision, Emitted, EventPage, Heartbeat, Key, Page, Run, Session } from "./records.js";
import {
  pageOf, parseAgent, parseClaim, parseEmitted, parseEventPage, parseHeartbeat, parseKey, parseRun, parseSession,
} from "./records.js";
import type { Call } from "./transport.js";
import { idempotent, query, segment } from "./transport.js";
import { InvalidRequest } from "./errors.js";
import { checkSeconds, encode } from "./values.js";

export const MAX_RUN_WAIT = 60;
export const MAX_CLAIM_WAIT = 30;

const nothing = (): void => undefined;
const clamp = (seconds: number, high: number): number => Math.round(Math.max(0, Math.min(high, seconds)) * 1000) / 1000;

// -- keys ---------------------------------------------------------------------------------------

export function createKey(role: string, name: string | undefined): Call<Key> {
  return { method: "POST", path: "/v0/keys", body: encode({ role, name }), parse: parseKey };
}

export function listKeys(): Call<Key[]> {
  return { method: "GET", path: "/v0/keys", safe: true, parse: (answer) => (answer.keys as unknown[]).map(parseKey) };
}

export function revokeKey(id: string): Call<void> {
  return { method: "DELETE", path: `/v0/keys/${segment(id)}`, parse: nothing };
}

// -- sessions -----------------------------------------------------------------------------------

export interface SessionFields {
  id?: string;
  user?: string;
  metadata?: unknown;
}

export function createSession(fields: SessionFields): Call<Session> {
  const body = encode({ id: fields.id, user: fields.user, metadata: fields.metadata });
  return { method: "POST", path: "/v0/sessions", body, parse: parseSession, safe: fields.id !== undefined };
}

/** A fork's fields: `lists` maps `"AGENT/KEY"` to how many of that list's first items the fork keeps. */
export interface ForkFields extends SessionFields {
  lists?: Record<string, number>;
}

export function forkSession(id: string, fields: ForkFields): Call<Session> {
  // With an explicit id, a repeat from the same source answers the fork already made: safe to retry.
  const body = encode({ id: fields.id, user: fields.user, metadata: fields.metadata, lists: fields.lists });
  return { method: "POST", path: `/v0/sessions/${segment(id)}/fork`, body, parse: parseSession, safe: fields.id !== undefined };
}

export function getSession(id: string): Call<Session> {
  return { method: "GET", path: `/v0/sessions/${segment(id)}`, parse: parseSession, safe: true };
}

export function listSessions(user: string | undefined, after: string | undefined, limit: number | undefined): Call<Page<Session>> {
  const params = query({ user, after, limit });
  return { method: "GET", path: "/v0/sessions", params, parse: pageOf("sessions", parseSession), safe: true };
}

export function updateSession(id: string, metadata: unknown): Call<Session> {
  // Not repeated after a lost answer: like an unguarded put, a repeat could undo a newer replacement.
  const body = encode({ metadata: metadata ?? null });
  return { method: "PATCH", path: `/v0/sessions/${segment(id)}`, body, parse: parseSession };
}

export function deleteSession(id: string): Call<void> {
  return { method: "DELETE", path: `/v0/sessions/${segment(id)}`, parse: nothing };
}

// -- runs ---------------------------------------------------------------------------------------

/**
 * What starting a run does while its session has a run queued or running: `reject` (the default) throws
 * `SessionBusy`; `enqueue` queues it to start once the turns before it are done, in start order;
 * `interrupt` cancels the session's queued runs, requests the cancel of its running one (its worker sees
 * `cancelRequested`) and queues it behind that one. A held run is neither waited for nor interrupted.
 */
export type Multitask = "reject" | "enqueue" | "interrupt";

export interface StartOptions {
  sessionId?: string;
  idempotencyKey?: string;
  /** Seconds (1–86400) the run may stay queued before it becomes `expired`; default the server's. */
  queueTimeout?: number;
  /** While the session has a run queued or running: `reject` (the server's default), `enqueue`, `interrupt`. */
  multitask?: Multitask;
}

/** Start a run; with a run `token` it is a child of the token's run. */
export function startRun(agent: string, input: unknown, options: StartOptions, token?: string): Call<Run> {
  const body = encode({
    agent, input, session_id: options.sessionId, idempotency_key: options.idempotencyKey,
    queue_timeout: checkSeconds(options.queueTimeout, "queueTimeout"), multitask: options.multitask,
  });
  return idempotent({ method: "POST", path: "/v0/runs", body, token, parse: parseRun });
}

/** Read a run; with `wait` (≤ 60 s) the server answers once it is no longer queued or running. */
export function getRun(id: string, wait?: number): Call<Run> {
  const seconds = wait === undefined ? undefined : clamp(wait, MAX_RUN_WAIT);
  const params = query({ wait: seconds });
  return { method: "GET", path: `/v0/runs/${segment(id)}`, params, parse: parseRun, safe: true, longPoll: seconds ?? 0 };
}

export interface RunFilter {
  sessionId?: string;
  status?: string;
}

export function listRuns(filter: RunFilter, after: string | undefined, limit: number | undefined): Call<Page<Run>> {
  const params = query({ session_id: filter.sessionId, status: filter.status, after, limit });
  return { method: "GET", path: "/v0/runs", params, parse: pageOf("runs", parseRun), safe: true };
}

export function decide(id: string, decision: Partial<Decision> & { approved: boolean }): Call<Run> {
  const body = encode({ approved: Boolean(decision.approved), data: decision.data });
  return idempotent({ method: "POST", path: `/v0/runs/${segment(id)}/decision`, body, parse: parseRun });
}

export function cancelRun(id: string): Call<Run> {
  return idempotent({ method: "POST", path: `/v0/runs/${segment(id)}/cancel`, parse: parseRun });
}

/** A page of the run's events with a seq past `after` (its owner, an admin). */
export function runEvents(id: string, after: number, limit: number | undefined): Call<EventPage> {
  const params = query({ after: after || undefined, limit });
  return { method: "GET", path: `/v0/runs/${segment(id)}/events`, params, parse: parseEventPage, safe: true };
}

// -- agents -------------------------------------------------------------------------------------

export function listAgents(): Call<AgentInfo[]> {
  return { method: "GET", path: "/v0/agents", safe: true, parse: (answer) => (answer.agents as unknown[]).map(parseAgent) };
}

// -- invocations (worker side) ------------------------------------------------------------------

/** Long-poll for an invocation of one of `agents`; null when none came within `wait` seconds. */
export function claim(agents: string[], wait: number): Call<Claim | null> {
  const seconds = clamp(wait, MAX_CLAIM_WAIT);
  const parse = (answer: unknown): Claim | null => (answer === null ? null : parseClaim(answer));
  return { method: "POST", path: "/v0/invocations/claim", body: encode({ agents, wait: seconds }), parse, longPoll: seconds };
}

function invocation<T>(claimed: Claim, action: string, parse: (answer: any) => T, body?: string): Call<T> {
  const path = `/v0/invocations/${segment(claimed.id)}/${action}`;
  return { method: "POST", path, body, parse, token: claimed.token };
}

/** An invocation's outcome, once: a repeat of one that landed answers as the first did (not refused as
 * a stale run token would be), so the worker sees its outcome reported. */
function outcome(claimed: Claim, action: "complete" | "fail" | "hold", body: string): Call<void> {
  return idempotent(invocation(claimed, action, nothing, body));
}

export function heartbeat(claimed: Claim): Call<Heartbeat> {
  // Only renews the lease: a repeat does nothing twice.
  return { ...invocation(claimed, "heartbeat", parseHeartbeat), safe: true };
}

/** `output` must be encoded already (`values.encodeSized`), so that a bad one can fail the run instead. */
export function complete(claimed: Claim, output: string): Call<void> {
  return outcome(claimed, "complete", `{"output":${output}}`);
}

export function fail(claimed: Claim, type: string, message: string): Call<void> {
  return outcome(claimed, "fail", JSON.stringify({ error: { type, message } }));
}

/** One event to emit: `type` (default `message`: the server's) and `data`, any JSON value. */
export interface EventItem {
  type?: string;
  data: unknown;
}

/**
 * Append events to the run's log, once: its idempotency key makes a repeat after a lost answer answer
 * with the seq of the first, writing nothing. The type's form and the limits (100 a call, 64 KiB of
 * data) are the server's to judge.
 */
export function emit(claimed: Claim, events: EventItem[]): Call<Emitted> {
  if (!Array.isArray(events)) throw new InvalidRequest("events must be a list of {type?, data}");
  const items = events.map((item, index) => {
    if (item === null || typeof item !== "object" || !("data" in item)) {
      throw new InvalidRequest(`events[${index}] must be {type?, data}`);
    }
    if (item.type !== undefined && typeof item.type !== "string") throw new InvalidRequest(`events[${index}].type must be a string`);
    const data = item.data ?? null;
    return item.type === undefined ? { data } : { type: item.type, data };
  });
  return idempotent(invocation(claimed, "events", parseEmitted, encode({ events: items })));
}

/** `request` must be encoded already, as for `complete`. */
export function hold(claimed: Claim, request: string): Call<void> {
  return outcome(claimed, "hold", `{"request":${request}}`);
}
