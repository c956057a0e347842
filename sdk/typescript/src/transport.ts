/**
 * Sending one API request: the credential, the timeout, the retries, the answer or the error.
 *
 * A `Call` describes a request completely (method, path, body, which credential, whether repeating
 * it is safe, how to read its answer); `Sender.send` is the only place that touches `fetch`.
 *
 * Retries, as in the Python SDK and for the same reason: a request that never reached the server
 * (connection refused, name not resolved) is always retried; a 502/503/504 or a lost answer (the
 * connection dropped, the timeout passed) only when repeating the call cannot do anything twice —
 * GETs, a heartbeat, session creation with an explicit id, and every write to a route that takes an
 * `Idempotency-Key` (`idempotent`: the key is made once with the call and sent on every attempt, so
 * the server applies the write once and answers a repeat as it answered the first). A 503 waits for
 * its `Retry-After` (at most 30 s); a 409 `idempotency_in_flight` (the first attempt is still being
 * applied) is waited out with the backoff. Every attempt has its own timeout (30 s by default, plus
 * the seconds a long poll may wait).
 */

import { fromWire, KeepstateError, Unavailable } from "./errors.js";
import { needsRawPath, rawPathFetch } from "./raw-path.js";

export const DEFAULT_URL = "http://127.0.0.1:8420";
export const DEFAULT_TIMEOUT = 30;
export const DEFAULT_RETRIES = 3;
export const TOKEN_HEADER = "x-agentos-run-token";
export const IDEMPOTENCY_HEADER = "idempotency-key";
const IN_FLIGHT = "idempotency_in_flight";
const MAX_RETRY_AFTER = 30;
const RETRY_STATUSES = new Set([502, 503, 504]);
/** Error codes (Node's, undici's) of a connection that was never made: the request was not sent. */
const NEVER_SENT = new Set([
  "ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT",
]);

export type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** One API request, fully described. */
export interface Call<T> {
  method: Method;
  path: string;
  /** Turns the JSON answer of a 2xx (null for 204) into the result. */
  parse: (answer: any) => T;
  body?: string;
  params?: Record<string, string>;
  /** A run token (`x-agentos-run-token`) instead of the client's key. */
  token?: string;
  /** Repeating it after it may have reached the server cannot do anything twice. */
  safe?: boolean;
  /** A write's `Idempotency-Key`, the same on every attempt (see `idempotent`). */
  idempotencyKey?: string;
  /** Seconds the server may hold the answer (a long poll), added to the timeout. */
  longPoll?: number;
  /** What a 404 means instead of an error (reads of absent keys). */
  absent?: () => T;
}

/** Where and as whom to talk. */
export interface Config {
  baseUrl: string;
  key: string | undefined;
  /** Seconds per attempt. */
  timeout: number;
  retries: number;
  fetch: FetchLike;
}

/** The options every `Client` and `Worker` takes. */
export interface ConnectionOptions {
  /** An API key (`Authorization: Bearer`); default `KEEPSTATE_KEY`. */
  key?: string | undefined;
  /** Seconds one request may take (a long poll gets its wait on top); default 30. */
  timeout?: number;
  /** Retries of a safe call (see the docs); default 3. */
  retries?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: FetchLike;
}

function environment(name: string): string | undefined {
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return env?.[name] || undefined;
}

export function buildConfig(url: string | undefined, options: ConnectionOptions): Config {
  const fetcher = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
  if (typeof fetcher !== "function") throw new TypeError("keepstate needs a global fetch (Node.js 18+) or options.fetch");
  const timeout = options.timeout ?? DEFAULT_TIMEOUT;
  const retries = options.retries ?? DEFAULT_RETRIES;
  if (!(timeout > 0 && Number.isFinite(timeout))) throw new RangeError("timeout must be a number of seconds > 0");
  if (!Number.isSafeInteger(retries) || retries < 0) throw new RangeError("retries must be an integer of at least 0");
  return {
    baseUrl: (url || environment("KEEPSTATE_URL") || DEFAULT_URL).replace(/\/+$/, ""),
    key: options.key || environment("KEEPSTATE_KEY"),
    timeout, retries, fetch: fetcher,
  };
}

/** One path segment: percent-encoded, and dots alone escaped so that `.` and `..` stay keys, not path steps. */
export function segment(text: string): string {
  return /^\.+$/.test(text) ? "%2E".repeat(text.length) : encodeURIComponent(text);
}

/** Query parameters, leaving out undefined and null. */
export function query(params: Record<string, string | number | boolean | null | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null) out[name] = String(value);
  }
  return out;
}

/** A new idempotency key: 32 hex characters (16 random bytes), in the key charset. */
export function freshKey(): string {
  const bytes = new Uint8Array(16);
  const crypto = (globalThis as { crypto?: { getRandomValues?: (array: Uint8Array) => unknown } }).crypto;
  if (crypto?.getRandomValues) crypto.getRandomValues(bytes);
  // Node.js 18 has no global `crypto` without a flag: a key need only be unique for its caller, not secret.
  else for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(Math.random() * 256);
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/**
 * `call` to a route that takes an `Idempotency-Key` (every write the HTTP API's "Idempotent writes"
 * lists), with a fresh one: made now, once, so every retry of this call repeats it and the server
 * applies the write once however many attempts reach it.
 */
export function idempotent<T>(call: Call<T>, key?: string): Call<T> {
  return { ...call, idempotencyKey: key ?? freshKey() };
}

/** Safe to send again after it may have reached the server: by its nature, or by its key. */
export function repeatable(call: Call<unknown>): boolean {
  return call.safe === true || call.idempotencyKey !== undefined;
}

/** Jittered exponential backoff in seconds: about 0.1, 0.2, 0.4 … capped at 5. */
export function backoff(attempt: number): number {
  return (0.5 + Math.random() * 0.5) * Math.min(5, 0.1 * 2 ** attempt);
}

export function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

interface Answer {
  status: number;
  text: string;
  retryAfter: string | null;
}

/** Sends `Call`s with one configuration: credentials, timeouts, retries. */
export class Sender {
  constructor(readonly config: Config) {}

  async send<T>(call: Call<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let answer: Answer;
      try {
        answer = await this.exchange(call);
      } catch (error) {
        const failure = error as Error;
        if (!this.mayRetry(attempt, isNeverSent(failure) || repeatable(call))) throw this.unreachable(failure);
        await sleep(backoff(attempt));
        continue;
      }
      const wait = waitBeforeRepeating(call, answer, attempt);
      if (wait === undefined || !this.mayRetry(attempt, true)) return finish(call, answer);
      await sleep(wait);
    }
  }

  /**
   * Open `call` for an answer read as it comes (an event stream), once: no retries (its reader decides
   * when to connect again), `headers` added. The response once its head is a 2xx; else the error the
   * server sent (a 502/503/504 too), or `Unavailable` when it could not be reached or sent no head
   * within the timeout. `controller` aborts it, and later the reading of its body.
   */
  async open(call: Call<unknown>, headers: Record<string, string>, controller: AbortController): Promise<Response> {
    const seconds = this.config.timeout;
    const timer = setTimeout(() => controller.abort(new TimeoutAbort(seconds)), seconds * 1000);
    let response: Response;
    try {
      const init = { method: call.method, headers: { ...this.headers(call), ...headers }, signal: controller.signal };
      response = await this.config.fetch(this.url(call), init);
    } catch (error) {
      throw this.unreachable(error as Error, 0); // no server said when: the reader's own backoff decides
    } finally {
      clearTimeout(timer);
    }
    if (response.ok) return response;
    const text = await response.text().catch(() => "");
    throw fromWire(response.status, decode(text), retryDelay(response.headers.get("retry-after")));
  }

  private mayRetry(attempt: number, safe: boolean): boolean {
    return safe && attempt < this.config.retries;
  }

  private async exchange(call: Call<unknown>): Promise<Answer> {
    const seconds = this.config.timeout + (call.longPoll ?? 0);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new TimeoutAbort(seconds)), seconds * 1000);
    try {
      const fetcher = needsRawPath(call.path) ? rawPathFetch : this.config.fetch;
      const response = await fetcher(this.url(call), {
        method: call.method, headers: this.headers(call), body: call.body, signal: controller.signal,
      });
      const text = await response.text();
      return { status: response.status, text, retryAfter: response.headers.get("retry-after") };
    } catch (error) {
      throw controller.signal.aborted ? new TimeoutAbort(seconds) : error;
    } finally {
      clearTimeout(timer);
    }
  }

  private url(call: Call<unknown>): string {
    const search = new URLSearchParams(call.params ?? {}).toString();
    return `${this.config.baseUrl}${call.path}${search ? `?${search}` : ""}`;
  }

  private headers(call: Call<unknown>): Record<string, string> {
    const headers: Record<string, string> = { accept: "application/json", "user-agent": "keepstate-typescript" };
    if (call.body !== undefined) headers["content-type"] = "application/json";
    if (call.token !== undefined) headers[TOKEN_HEADER] = call.token;
    else if (this.config.key) headers["authorization"] = `Bearer ${this.config.key}`;
    if (call.idempotencyKey !== undefined) headers[IDEMPOTENCY_HEADER] = call.idempotencyKey;
    return headers;
  }

  private unreachable(error: Error, retryAfter = 1): KeepstateError {
    const cause = (error as { cause?: { code?: unknown; message?: unknown } }).cause;
    const detail = [error.message, cause?.code ?? cause?.message].filter(Boolean).join(": ");
    return new Unavailable(`cannot reach keepstate at ${this.config.baseUrl}: ${detail}`, { retryAfter });
  }
}

/** The abort reason of an attempt that ran out of time: the answer is lost, the request may have landed. */
class TimeoutAbort extends Error {
  constructor(seconds: number) {
    super(`no answer within ${seconds} s`);
    this.name = "TimeoutAbort";
  }
}

function isNeverSent(error: Error): boolean {
  const cause = (error as { cause?: { code?: unknown } }).cause;
  return typeof cause?.code === "string" && NEVER_SENT.has(cause.code);
}

/** Seconds to wait before sending `call` again after `answer`, or undefined to take it as the answer. */
function waitBeforeRepeating(call: Call<unknown>, answer: Answer, attempt: number): number | undefined {
  if (!repeatable(call)) return undefined;
  if (RETRY_STATUSES.has(answer.status)) return retryDelay(answer.retryAfter) ?? backoff(attempt);
  const inFlight = answer.status === 409 && (decode(answer.text) as { error?: unknown } | null)?.error === IN_FLIGHT;
  return inFlight && call.idempotencyKey !== undefined ? backoff(attempt) : undefined;
}

function retryDelay(header: string | null): number | undefined {
  if (!header || !/^\s*\d+(\.\d+)?\s*$/.test(header)) return undefined; // an HTTP date: our own backoff
  return Math.min(Number(header), MAX_RETRY_AFTER);
}

function decode(text: string): unknown {
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The parsed answer of a final response, or the exact error the server sent. */
function finish<T>(call: Call<T>, answer: Answer): T {
  const body = decode(answer.text);
  if (answer.status >= 200 && answer.status < 300) return call.parse(body);
  if (answer.status === 404 && call.absent) return call.absent();
  throw fromWire(answer.status, body, retryDelay(answer.retryAfter));
}
