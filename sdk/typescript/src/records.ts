/**
 * The records the HTTP API answers with, in camelCase, and their parsers.
 *
 * Parsing is tolerant on purpose, as in the Python SDK: the fields the spec names are read (an
 * absent one becomes null), fields a newer server adds are ignored, so an older SDK keeps working
 * against a newer server. Timestamps are milliseconds since the epoch.
 */

export type RunStatus = "queued" | "running" | "done" | "failed" | "held" | "interrupted" | "cancelled" | "expired";

/** A person's answer to a held run, as its resume sees it. */
export interface Decision {
  approved: boolean;
  data: any;
  /** The name of the key that decided (its id when unnamed); absent from servers before it was recorded. */
  by?: string;
  /** When the decision was recorded, ms since the epoch. */
  at?: number;
}

/** One turn of a session (or a run without one). */
export interface Run {
  id: string;
  agent: string;
  sessionId: string | null;
  user: string | null;
  parentId: string | null;
  status: RunStatus;
  input: any;
  output: any;
  /** For a failed run: `{type, message}`. */
  error: { type: string; message: string } | null;
  /** For a held run: what the agent asked for. */
  hold: any;
  decision: Decision | null;
  createdAt: number | null;
  updatedAt: number | null;
}

/** The runs (turns) of one conversation. `owner` is the id of the key that created it. */
export interface Session {
  id: string;
  owner: string | null;
  user: string | null;
  metadata: any;
  createdAt: number | null;
  /** The id of the session this one was forked from; null when not forked. */
  parent: string | null;
}

/** An API key. `key`, the secret, is only in the answer to `keys.create`: it is shown once. */
export interface Key {
  id: string;
  role: string;
  name: string | null;
  createdAt: number | null;
  key?: string;
}

/** An agent of the environment: claimed for by a worker, or with runs. */
export interface AgentInfo {
  name: string;
  lastClaimAt: number | null;
  queued: number;
  running: number;
  held: number;
}

/** An invocation a worker claimed: one execution of a run (its start, or a resume). */
export interface Claim {
  id: string;
  runId: string;
  agent: string;
  kind: "start" | "resume";
  input: any;
  decision: Decision | null;
  sessionId: string | null;
  user: string | null;
  parentId: string | null;
  token: string;
  leaseSeconds: number;
}

/** The answer to a heartbeat. */
export interface Heartbeat {
  leaseSeconds: number;
  cancelRequested: boolean;
}

/**
 * One event of a run's log. `seq` counts 1, 2, 3… per run across its invocations; `type` is the
 * emitter's (`message` by default) or the platform's (`run.status` `{status}`, `run.output` `{output}`);
 * `at` is the server's time (ms since the epoch).
 */
export interface RunEvent {
  seq: number;
  type: string;
  data: any;
  at: number | null;
}

/** A page of a run's events, oldest first; `next` is the `after` of the next page, null on the last. */
export interface EventPage {
  events: RunEvent[];
  next: number | null;
}

/** The answer to an emit: the last seq written, and whether a cancel was requested. */
export interface Emitted {
  seq: number;
  cancelRequested: boolean;
}

/** One page of a listing and the cursor of the next (null on the last). */
export interface Page<T> {
  items: T[];
  next: string | null;
}

type Wire = Record<string, any>;

function object(data: unknown, what: string): Wire {
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw new TypeError(`expected a JSON object for ${what}, got ${JSON.stringify(data)?.slice(0, 80)}`);
  }
  return data as Wire;
}

const or = <T>(value: T | undefined): T | null => (value === undefined ? null : value);

/** A run's status is no longer queued or running (held counts as finished: it waits for a person). */
export function isFinished(run: Pick<Run, "status">): boolean {
  return run.status !== "queued" && run.status !== "running";
}

export function parseRun(data: unknown): Run {
  const w = object(data, "a run");
  return {
    id: w["id"], agent: w["agent"], sessionId: or(w["session_id"]), user: or(w["user"]),
    parentId: or(w["parent_id"]), status: w["status"], input: or(w["input"]), output: or(w["output"]),
    error: or(w["error"]), hold: or(w["hold"]), decision: or(w["decision"]),
    createdAt: or(w["created_at"]), updatedAt: or(w["updated_at"]),
  };
}

export function parseSession(data: unknown): Session {
  const w = object(data, "a session");
  return {
    id: w["id"], owner: or(w["owner"]), user: or(w["user"]), metadata: or(w["metadata"]), createdAt: or(w["created_at"]),
    parent: or(w["parent"]),
  };
}

export function parseKey(data: unknown): Key {
  const w = object(data, "a key");
  const key: Key = { id: w["id"], role: w["role"], name: or(w["name"]), createdAt: or(w["created_at"]) };
  if (typeof w["key"] === "string") key.key = w["key"];
  return key;
}

export function parseAgent(data: unknown): AgentInfo {
  const w = object(data, "an agent");
  return {
    name: w["name"], lastClaimAt: or(w["last_claim_at"]),
    queued: w["queued"] ?? 0, running: w["running"] ?? 0, held: w["held"] ?? 0,
  };
}

export function parseClaim(data: unknown): Claim {
  const w = object(data, "a claim");
  return {
    id: w["id"], runId: w["run_id"], agent: w["agent"], kind: w["kind"], input: or(w["input"]),
    decision: or(w["decision"]), sessionId: or(w["session_id"]), user: or(w["user"]),
    parentId: or(w["parent_id"]), token: w["token"], leaseSeconds: Number(w["lease_seconds"] ?? 30),
  };
}

export function parseHeartbeat(data: unknown): Heartbeat {
  const w = object(data, "a heartbeat");
  return { leaseSeconds: Number(w["lease_seconds"] ?? 30), cancelRequested: Boolean(w["cancel_requested"]) };
}

/** A run in `status` will not run again: done, failed, cancelled, expired, interrupted (not held). */
export function hasEnded(status: unknown): boolean {
  return typeof status === "string" && status !== "queued" && status !== "running" && status !== "held";
}

/** The `run.status` event that ends its run. */
export function isFinal(event: RunEvent): boolean {
  return event.type === "run.status" && hasEnded((event.data as { status?: unknown } | null)?.status);
}

export function parseRunEvent(data: unknown): RunEvent {
  const w = object(data, "an event");
  return { seq: Number(w["seq"]), type: w["type"] ?? "message", data: or(w["data"]), at: or(w["at"]) };
}

export function parseEventPage(data: unknown): EventPage {
  const w = object(data, "a page of events");
  const events = Array.isArray(w["events"]) ? (w["events"] as unknown[]).map(parseRunEvent) : [];
  return { events, next: w["next"] === undefined || w["next"] === null ? null : Number(w["next"]) };
}

export function parseEmitted(data: unknown): Emitted {
  const w = object(data, "an emit's answer");
  return { seq: Number(w["seq"] ?? 0), cancelRequested: Boolean(w["cancel_requested"]) };
}

/** A page `{[field]: [...], next}` of records parsed by `parse`. */
export function pageOf<T>(field: string, parse: (data: unknown) => T): (data: unknown) => Page<T> {
  return (data) => {
    const w = object(data, `a page of ${field}`);
    const items = Array.isArray(w[field]) ? (w[field] as unknown[]).map(parse) : [];
    return { items, next: or(w["next"]) };
  };
}
