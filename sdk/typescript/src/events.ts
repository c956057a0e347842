/**
 * `client.runs.stream(runId)`: a run's events as they are written, read as Server-Sent Events from
 * `GET /v0/runs/{id}/events` over `fetch`'s streamed body, across as many connections as it takes.
 *
 * A connection can end three ways, and only one of them ends the stream (the Python SDK's rules):
 * - the server closes it after the event that gives the run its final status (done, failed,
 *   cancelled, expired, interrupted): the run is over, so is the stream;
 * - it drops (a restart, a proxy, no byte for `IDLE_LIMIT` seconds while the server promises a
 *   comment every 15 s): connect again, after a backoff, with `Last-Event-ID` the last seq yielded;
 * - the server closes it cleanly before a final status (a graceful shutdown): the same. When such a
 *   connection brought nothing new, the run may have ended already (a stream asked from after its last
 *   event is closed at once): the run is read; if it ended, the events still past the last seq are read
 *   as pages, and the stream ends with them.
 *
 * An event is yielded once, in seq order: one not past the last seq yielded is dropped, and each
 * connection starts right after the last one yielded, so none is skipped. Reconnecting gives up (the
 * last error, `Unavailable` for a server it cannot reach) only after `RECONNECT_WINDOW` seconds without
 * a connection that brought an event; an error the server sends (other than 502/503/504) is thrown
 * at once. `close()` (or leaving a `for await`) closes the connection.
 */

import * as calls from "./calls.js";
import { KeepstateError, Unavailable } from "./errors.js";
import type { EventPage, RunEvent } from "./records.js";
import { hasEnded, isFinal, parseRunEvent } from "./records.js";
import type { Sender } from "./transport.js";
import { backoff, segment } from "./transport.js";

/** Seconds a stream's read may wait for a byte: three of the server's 15 s keep-alive comments. */
export const IDLE_LIMIT = 45;
/** Seconds of failed reconnects (none bringing an event) after which the stream throws. */
export const RECONNECT_WINDOW = 60;
const EVENT_STREAM = "text/event-stream";
const MAX_RETRY_AFTER = 30;
const RETRY_STATUSES = new Set([502, 503, 504]);

/** One Server-Sent Event: its `id`, `event` (`message` when absent) and `data` lines joined. */
export interface SseMessage {
  id: string | undefined;
  type: string;
  data: string;
}

/** Server-Sent Events as the WHATWG rules read them, from text that may split a line anywhere. */
export class SseParser {
  private buffer = "";
  private id: string | undefined;
  private type = "";
  private data: string[] = [];

  /** Take the next piece of text; the events it completes. */
  push(text: string): SseMessage[] {
    this.buffer += text;
    const found: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const char = this.buffer[i];
      if (char !== "\n" && char !== "\r") continue;
      if (char === "\r" && i + 1 === this.buffer.length) break; // its "\n" may come with the next piece
      const line = this.buffer.slice(start, i);
      if (char === "\r" && this.buffer[i + 1] === "\n") i++;
      start = i + 1;
      const message = this.line(line);
      if (message) found.push(message);
    }
    this.buffer = this.buffer.slice(start);
    return found;
  }

  /** Forget a half-read event (its connection ended before its blank line). */
  reset(): void {
    this.buffer = "";
    this.id = undefined;
    this.type = "";
    this.data = [];
  }

  private line(line: string): SseMessage | undefined {
    if (line === "") {
      const message = this.data.length ? { id: this.id, type: this.type || "message", data: this.data.join("\n") } : undefined;
      this.id = undefined;
      this.type = "";
      this.data = [];
      return message;
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.data.push(value);
    else if (name === "event") this.type = value;
    else if (name === "id" && !value.includes("\u0000")) this.id = value;
    return undefined;
  }
}

/**
 * A run event from one SSE message: its `data` is the event as JSON, `{seq, type, data, at}`, as in a
 * page (its `id` and `event` repeat the seq and the type).
 */
export function parseMessage(message: SseMessage): RunEvent {
  let wire: unknown;
  try {
    wire = JSON.parse(message.data);
  } catch {
    throw new KeepstateError(`the event stream sent data that is not JSON: ${message.data.slice(0, 80)}`);
  }
  if (wire === null || typeof wire !== "object" || Array.isArray(wire)) {
    throw new KeepstateError(`the event stream sent data that is not an event: ${message.data.slice(0, 80)}`);
  }
  return parseRunEvent({ seq: message.id, type: message.type, ...wire });
}

/** A stream reconnects after a server it cannot reach, or one that answers 502/503/504. */
export function isRetryable(error: KeepstateError): boolean {
  return error instanceof Unavailable || RETRY_STATUSES.has(error.status);
}

/** The I/O-free state of one stream: the last seq yielded, and what to do when a connection ends. */
export class Cursor {
  /** True once an event gave the run its final status: a clean close then ends the stream. */
  over = false;
  /** The connection being read brought an event. */
  fresh = false;
  private connections = 0;
  private failures = 0;
  private failingSince: number | undefined;

  constructor(public last: number, private readonly now: () => number = () => performance.now() / 1000) {
    if (!Number.isSafeInteger(last) || last < 0) throw new RangeError("after must be a seq, 0 or more");
  }

  /** The query and headers of the next connection: after the last seq yielded. */
  request(): { params: Record<string, string>; headers: Record<string, string> } {
    const headers: Record<string, string> = { accept: EVENT_STREAM, "cache-control": "no-cache" };
    if (this.connections++ > 0) headers["last-event-id"] = String(this.last);
    this.fresh = false;
    return { params: this.last ? { after: String(this.last) } : {}, headers };
  }

  /** `event` when it is past the last seq yielded (and then it is the last), else undefined. */
  take(event: RunEvent): RunEvent | undefined {
    if (event.seq <= this.last) return undefined;
    this.last = event.seq;
    this.fresh = true;
    this.failures = 0;
    this.failingSince = undefined;
    this.over ||= isFinal(event);
    return event;
  }

  /** The events of a page not yet yielded, and whether it was the last page. */
  drained(page: EventPage): { events: RunEvent[]; done: boolean } {
    const events = page.events.filter((event) => this.take(event) !== undefined);
    return { events, done: page.next === null || page.events.length === 0 };
  }

  /**
   * Seconds to wait before connecting again after a failed or closed connection; throws `error` when
   * it cannot be retried, or once reconnecting has failed for `RECONNECT_WINDOW` seconds.
   */
  retryIn(error?: KeepstateError): number {
    if (error && !isRetryable(error)) throw error;
    const now = this.now();
    if (this.fresh) {
      this.failures = 0;
      this.failingSince = undefined;
    }
    this.failingSince ??= now;
    if (error && now - this.failingSince > RECONNECT_WINDOW) throw error;
    let wait = backoff(this.failures++);
    const retryAfter = (error as { retryAfter?: unknown } | undefined)?.retryAfter;
    if (typeof retryAfter === "number" && retryAfter > 0) wait = Math.max(wait, Math.min(retryAfter, MAX_RETRY_AFTER));
    return wait;
  }
}

/** The options of `client.runs.stream`. */
export interface StreamOptions {
  /** Yield the events with a seq past this one; default 0 (all). */
  after?: number;
}

/**
 * A run's events as they are written, each once and in seq order, until the run has ended: read it
 * with `for await`, once. `close()` closes the connection at once (also while a read waits).
 */
export class EventStream implements AsyncIterable<RunEvent> {
  private readonly cursor: Cursor;
  private controller: AbortController | undefined;
  private wake: (() => void) | undefined;
  private closed = false;
  private started = false;

  /** Made by `client.runs.stream(runId, { after })`. */
  constructor(private readonly sender: Sender, readonly runId: string, options: StreamOptions = {}) {
    this.cursor = new Cursor(options.after ?? 0);
  }

  /** The seq of the last event yielded (`after` before the first). */
  get lastSeq(): number {
    return this.cursor.last;
  }

  /** Stop: the connection is closed now, and a `for await` over the stream ends. */
  close(): void {
    this.closed = true;
    this.controller?.abort();
    this.wake?.();
  }

  [Symbol.asyncIterator](): AsyncGenerator<RunEvent, void, undefined> {
    if (this.started) throw new Error("a stream is read once: call client.runs.stream again");
    this.started = true;
    return this.read();
  }

  private async *read(): AsyncGenerator<RunEvent, void, undefined> {
    try {
      while (!this.closed) {
        let failure: KeepstateError | undefined;
        try {
          yield* this.connection();
          if (this.closed || this.cursor.over) return;
          if (!this.cursor.fresh && hasEnded((await this.sender.send(calls.getRun(this.runId))).status)) {
            yield* this.drain();
            return;
          }
        } catch (error) {
          if (this.closed) return;
          if (!(error instanceof KeepstateError)) throw error;
          failure = error;
        }
        await this.pause(this.cursor.retryIn(failure));
      }
    } finally {
      this.close();
    }
  }

  private async *connection(): AsyncGenerator<RunEvent, void, undefined> {
    const { params, headers } = this.cursor.request();
    const controller = (this.controller = new AbortController());
    const call = { method: "GET" as const, path: `/v0/runs/${segment(this.runId)}/events`, params, parse: () => null };
    const response = await this.sender.open(call, headers, controller);
    try {
      const type = response.headers.get("content-type") ?? "";
      if (!type.startsWith(EVENT_STREAM) || !response.body) {
        throw new KeepstateError(`the server answered ${JSON.stringify(type)} where an event stream was asked`);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      const parser = new SseParser();
      for (;;) {
        const chunk = await this.next(reader, controller);
        if (chunk === undefined) return;
        for (const message of parser.push(decoder.decode(chunk, { stream: true }))) {
          const event = this.cursor.take(parseMessage(message));
          if (event) yield event;
        }
      }
    } finally {
      controller.abort();
    }
  }

  /** The next piece of the body (undefined at its end); `Unavailable` when it dropped or stayed idle too long. */
  private async next(reader: ReadableStreamDefaultReader<Uint8Array>, controller: AbortController): Promise<Uint8Array | undefined> {
    const idle = setTimeout(() => controller.abort(), IDLE_LIMIT * 1000);
    try {
      const { done, value } = await reader.read();
      return done ? undefined : value;
    } catch (error) {
      const cause = (error as { cause?: { code?: unknown } }).cause?.code ?? (error as Error).message;
      throw new Unavailable(`the event stream of run ${this.runId} dropped: ${String(cause)}`, { retryAfter: 0 });
    } finally {
      clearTimeout(idle);
    }
  }

  private async *drain(): AsyncGenerator<RunEvent, void, undefined> {
    for (;;) {
      const { events, done } = this.cursor.drained(await this.sender.send(calls.runEvents(this.runId, this.cursor.last, undefined)));
      yield* events;
      if (done) return;
    }
  }

  /** Wait `seconds`, or less when `close()` is called. */
  private pause(seconds: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, seconds * 1000);
      this.wake = done;
    });
  }
}
