/**
 * `client.runs.stream`'s rules against a scripted local server: each connection sends its events and
 * then drops, closes cleanly or refuses, so every way a connection can end happens by construction,
 * and the stream must still yield each event once, in seq order, and end only with the run (the
 * Python SDK's `test_sdk_events_unit.py` runs the same scripts). Against real servers: `run-events.test.ts`.
 */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from "node:http";
import { after, before, describe, it } from "node:test";
import { Client, NotFound, type RunEvent, Unavailable } from "keepstate";
import { Cursor, SseParser } from "../dist/events.js";

const RUN_ID = "run-1";

interface Wire {
  seq: number;
  type: string;
  data: unknown;
  at: number;
}

const event = (seq: number, type = "token", data: unknown = `t${seq}`): Wire => ({ seq, type, data, at: 1000 + seq });
const status = (seq: number, value: string): Wire => event(seq, "run.status", { status: value });
const sse = (item: Wire): string => `id: ${item.seq}\nevent: ${item.type}\ndata: ${JSON.stringify(item)}\n\n`;

interface Connection {
  events?: Wire[];
  drop?: boolean;
  status?: number;
  refusal?: unknown;
  comments?: number;
  /** Keep the connection open after the events (only the client can close it). */
  hold?: boolean;
}

interface Seen {
  url: URL;
  headers: IncomingMessage["headers"];
  closed: Promise<void>;
}

/** The server of a test: scripted stream connections, the run's status, and pages of its log. */
class Script {
  connections: Connection[] = [];
  runStatus = "running";
  log: Wire[] = [];
  streams: Seen[] = [];
  private readonly http: HttpServer;

  constructor() {
    this.http = createServer((request, response) => this.answer(request, response));
  }

  reset(connections: Connection[], runStatus = "running", log: Wire[] = []): void {
    Object.assign(this, { connections, runStatus, log, streams: [] });
  }

  listen(): Promise<string> {
    return new Promise((done) => this.http.listen(0, "127.0.0.1", () => {
      const address = this.http.address();
      done(`http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`);
    }));
  }

  close(): Promise<void> {
    this.http.closeAllConnections?.();
    return new Promise((done) => this.http.close(() => done()));
  }

  private answer(request: IncomingMessage, response: ServerResponse): void {
    const url = new URL(request.url ?? "/", "http://x");
    const json = (code: number, body: unknown) => {
      response.writeHead(code, { "content-type": "application/json", "retry-after": "0" });
      response.end(JSON.stringify(body));
    };
    if (url.pathname === `/v0/runs/${RUN_ID}`) return json(200, { id: RUN_ID, agent: "chat", status: this.runStatus });
    const after = Number(url.searchParams.get("after") ?? 0);
    if (request.headers.accept !== "text/event-stream") {
      const events = this.log.filter((item) => item.seq > after).slice(0, 2);
      return json(200, { events, next: events.length === 2 ? events[1]?.seq : null });
    }
    const closed = new Promise<void>((done) => response.once("close", () => done()));
    this.streams.push({ url, headers: request.headers, closed });
    const connection = this.connections.shift() ?? { status: 500, refusal: { error: "script_ended" } };
    if (connection.status) return json(connection.status, connection.refusal ?? {});
    response.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
    for (let n = 0; n < (connection.comments ?? 0); n++) response.write(": keep-alive\n\n");
    // an event split across writes, and its line ends too
    for (const item of connection.events ?? []) for (const piece of sse(item).match(/[^]{1,7}/g) ?? []) response.write(piece);
    if (connection.drop) setImmediate(() => response.socket?.destroy());
    else if (!connection.hold) response.end();
  }
}

let script: Script;
let url: string;

async function seqs(options: { after?: number; take?: number } = {}): Promise<number[]> {
  const stream = new Client(url, { key: "k" }).runs.stream(RUN_ID, { after: options.after });
  const found: number[] = [];
  for await (const item of stream) {
    found.push(item.seq);
    if (found.length === options.take) break;
  }
  return found;
}

describe("runs.stream against a scripted server", () => {
  before(async () => {
    script = new Script();
    url = await script.listen();
  });
  after(() => script.close());

  it("resumes after a drop from the last seq, never yielding a resent event again", async () => {
    script.reset([
      { events: [event(1), event(2)], drop: true },
      { events: [event(2), event(3), status(4, "done"), event(5, "run.output", { output: 1 })] },
    ]);
    assert.deepEqual(await seqs(), [1, 2, 3, 4, 5]);
    const [first, second] = script.streams;
    assert.equal(first?.headers["last-event-id"], undefined);
    assert.equal(first?.url.searchParams.get("after"), null);
    assert.equal(second?.headers["last-event-id"], "2");
    assert.equal(second?.url.searchParams.get("after"), "2");
  });

  it("waits through a hold and a clean close before the run's end", async () => {
    script.reset([
      { events: [event(1), status(2, "held")], comments: 2 },
      { events: [status(3, "queued"), status(4, "running")], drop: true },
      { events: [event(5), status(6, "failed")] },
    ]);
    assert.deepEqual(await seqs(), [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(script.streams.map((seen) => seen.headers["last-event-id"]), [undefined, "2", "4"]);
  });

  it("ends a stream asked past the end of an ended run, with the events still past its seq", async () => {
    script.reset([{ events: [] }], "done", [event(7), event(8), status(9, "done"), event(10, "run.output")]);
    assert.deepEqual(await seqs({ after: 8 }), [9, 10]);
    assert.equal(script.streams.length, 1);
  });

  it("reconnects after a clean close with nothing new while the run goes on", async () => {
    script.reset([{ events: [] }, { events: [status(1, "cancelled")] }], "running");
    assert.deepEqual(await seqs(), [1]);
  });

  it("keeps in the data the line breaks JSON leaves unescaped (U+2028, U+0085)", async () => {
    script.reset([{ events: [event(1, "token", "a\u2028b\u0085c\u2029"), status(2, "done")] }]);
    assert.deepEqual(await seqs(), [1, 2]);
  });

  it("throws a refusal as its class, without retrying it", async () => {
    script.reset([{ status: 404, refusal: { error: "not_found", message: "no such run" } }]);
    await assert.rejects(seqs(), NotFound);
    assert.equal(script.streams.length, 1);
  });

  it("retries a 503 and a 502", async () => {
    script.reset([
      { status: 503, refusal: { error: "unavailable", message: "busy", retry_after: 0 } },
      { status: 502, refusal: "bad gateway" },
      { events: [status(1, "done")] },
    ]);
    assert.deepEqual(await seqs(), [1]);
  });

  it("closes its connection when the loop is left early", async () => {
    script.reset([{ events: [event(1), event(2), event(3)], hold: true }]);
    const found = await seqs({ take: 2 });
    assert.deepEqual(found, [1, 2]);
    await script.streams[0]?.closed; // hangs (and the test times out) if the connection stayed open
    assert.equal(script.streams.length, 1);
  });

  it("closes its connection at once on close(), also while a read waits", async () => {
    script.reset([{ events: [event(1)], hold: true }]);
    const stream = new Client(url, { key: "k" }).runs.stream(RUN_ID);
    const iterator = stream[Symbol.asyncIterator]();
    assert.equal((await iterator.next()).value?.seq, 1);
    const pending = iterator.next();
    await new Promise((done) => setImmediate(done));
    stream.close();
    assert.deepEqual(await pending, { value: undefined, done: true });
    await script.streams[0]?.closed;
    assert.throws(() => stream[Symbol.asyncIterator](), /read once/);
  });
});

describe("the stream's rules, without I/O", () => {
  it("parses Server-Sent Events split anywhere, with any line end", () => {
    const parser = new SseParser();
    const text = ': hi\r\nid: 4\r\nevent: token\r\ndata: {"a":\r\ndata:  1}\r\nretry: 9\r\n\r\n\ndata: x\n\n';
    const found = [...text].flatMap((char) => parser.push(char));
    assert.deepEqual(found, [{ id: "4", type: "token", data: '{"a":\n 1}' }, { id: undefined, type: "message", data: "x" }]);
  });

  it("gives up reconnecting after its window without an event, not before", () => {
    let clock = 0;
    const cursor = new Cursor(0, () => clock);
    const down = new Unavailable("down");
    cursor.request();
    assert.ok(cursor.take({ seq: 1, type: "t", data: null, at: null } satisfies RunEvent));
    assert.ok(cursor.retryIn(down) >= 0);
    clock = 59;
    cursor.request();
    assert.ok(cursor.retryIn(down) >= 0);
    clock = 61;
    cursor.request();
    assert.throws(() => cursor.retryIn(down), Unavailable);
    assert.equal(cursor.take({ seq: 1, type: "t", data: null, at: null }), undefined, "never the same seq twice");
  });
});
