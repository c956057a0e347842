/**
 * keepstate for TypeScript: the agent side (`Worker`, `Invocation`) and the caller side (`Client`)
 * of a keepstate server, with the same state scopes and the same errors as the Python SDK, and a
 * runtime's `SessionStore` (leases, fences, `transact`) served by it.
 * No runtime dependencies: it needs a global `fetch` (Node.js 18+, Deno, Bun, browsers).
 *
 * This file is the public surface, and only that; a test checks its list of names.
 */

export { Batch } from "./batch.js";
export type { BatchResult } from "./batch.js";
export { Agents, CallerState, Client, Keys, Runs, Sessions } from "./client.js";
export type { ClientOptions } from "./client.js";
export type { EventItem, ForkFields, Multitask, RunFilter, SessionFields, StartOptions } from "./calls.js";
export {
  ERRORS, Forbidden, IdempotencyInFlight, IdempotencyMismatch, InvalidKey, InvalidRequest, InvalidValue,
  KeepstateError, LeaseLost, NoEmbedder, NoSession, NotAList, NotAnInteger, NotFound, NotHeld, NoUser, SessionBusy,
  SessionLocked, TooLarge, Unauthorized, Unavailable, VersionConflict,
} from "./errors.js";
export type { BatchConflict, ErrorDetails } from "./errors.js";
export { EventStream } from "./events.js";
export type { StreamOptions } from "./events.js";
export { HoldRequested, Invocation, InvocationState } from "./invocation.js";
export { Memory } from "./memory.js";
export type { Document, DocumentInfo, Hit, SearchMode, SearchOptions } from "./memory.js";
export { isFinished } from "./records.js";
export type { AgentInfo, Decision, EventPage, Key, Run, RunEvent, RunStatus, Session } from "./records.js";
export { Scope } from "./scope.js";
export { SessionStore } from "./sessions.js";
export type { SessionStoreOptions } from "./sessions.js";
export type { Expiry, Guard, ListPart, ListWrite, Once, Popped, ScopeName, Versioned, Written } from "./state-calls.js";
export type { ConnectionOptions, FetchLike } from "./transport.js";
export { Worker } from "./worker.js";
export type { Agent, Logger, RunOptions, WorkerOptions } from "./worker.js";
