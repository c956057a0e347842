/**
 * A TCP proxy in front of a real `keepstate serve` that loses answers on purpose, as the Python
 * suite's `tests/client/losing_proxy.py` does: each HTTP/1.1 request is forwarded and its answer
 * relayed, except for the requests a test chose with `lose(method, pathEnd)`. Those are forwarded,
 * the server's whole answer is read (so the write was applied and its answer kept), and then the
 * client's connection is dropped without a byte of it. Which requests are lost is chosen by
 * construction (the first N whose method and path match), never by timing. Every request is
 * recorded (method, path, headers, whether its answer was lost), so a test can see the key a retry
 * carried. Bodies are read by `Content-Length` or chunked framing.
 */

import { createConnection, createServer, type Server, type Socket } from "node:net";

/** One request that reached the proxy. */
export interface Seen {
  method: string;
  /** Without the query. */
  path: string;
  /** Names in lower case. */
  headers: Record<string, string>;
  lost: boolean;
  /** Its `Idempotency-Key`, if it had one. */
  key: string | undefined;
}

interface Rule {
  method: string;
  pathEnd: string;
  times: number;
}

interface Message {
  raw: Buffer;
  firstLine: string;
  headers: Record<string, string>;
}

export class LosingProxy {
  readonly seen: Seen[] = [];
  url = "";
  private readonly rules: Rule[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;

  private constructor(private readonly upstream: { host: string; port: number }) {
    this.server = createServer((client) => void this.serve(client));
  }

  /** A proxy listening on a free local port, forwarding to the server at `upstream` (its base URL). */
  static async start(upstream: string): Promise<LosingProxy> {
    const target = new URL(upstream);
    const proxy = new LosingProxy({ host: target.hostname, port: Number(target.port || 80) });
    await new Promise<void>((done) => proxy.server.listen(0, "127.0.0.1", done));
    const address = proxy.server.address();
    proxy.url = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}`;
    return proxy;
  }

  /** Lose the answers of the next `times` requests of `method` whose path ends with `pathEnd`. */
  lose(method: string, pathEnd: string, times = 1): void {
    this.rules.push({ method, pathEnd, times });
  }

  /** Forget the rules and the requests seen (between tests sharing the proxy). */
  reset(): void {
    this.rules.length = 0;
    this.seen.length = 0;
  }

  /** The requests seen of `method` whose path ends with `pathEnd`, in order. */
  requests(method: string, pathEnd: string): Seen[] {
    return this.seen.filter((seen) => seen.method === method && seen.path.endsWith(pathEnd));
  }

  close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    return new Promise((done) => this.server.close(() => done()));
  }

  private async serve(client: Socket): Promise<void> {
    const upstream = createConnection(this.upstream);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on("error", () => undefined); // a dropped peer ends the loop below
      socket.on("close", () => this.sockets.delete(socket));
    }
    const [fromClient, fromUpstream] = [new ByteReader(client), new ByteReader(upstream)];
    try {
      for (let request = await readMessage(fromClient); request; request = await readMessage(fromClient)) {
        const lost = this.record(request);
        upstream.write(request.raw);
        const answer = await readMessage(fromUpstream, request.firstLine.split(" ")[0]);
        if (!answer || lost) return; // a lost answer: the client's connection drops, the answer unsent
        client.write(answer.raw);
      }
    } catch {
      // a peer went away mid-message
    } finally {
      client.destroy();
      upstream.destroy();
    }
  }

  private record(request: Message): boolean {
    const [method = "", target = ""] = request.firstLine.split(" ");
    const path = target.split("?")[0] ?? "";
    const rule = this.rules.find((found) => found.method === method && path.endsWith(found.pathEnd));
    if (rule && --rule.times === 0) this.rules.splice(this.rules.indexOf(rule), 1);
    const key = request.headers["idempotency-key"];
    this.seen.push({ method, path, headers: request.headers, lost: rule !== undefined, key });
    return rule !== undefined;
  }
}

/** Bytes of a socket, read as a protocol needs them: up to a delimiter, or a given count. */
class ByteReader {
  private buffer = Buffer.alloc(0);
  private ended = false;
  private wake: (() => void) | undefined;

  constructor(socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.notify();
    });
    for (const event of ["end", "close"]) {
      socket.on(event, () => {
        this.ended = true;
        this.notify();
      });
    }
  }

  /** The bytes up to and with `delimiter`; null at a clean end of stream (nothing pending). */
  async until(delimiter: string): Promise<Buffer | null> {
    for (;;) {
      const at = this.buffer.indexOf(delimiter);
      if (at >= 0) return this.take(at + delimiter.length);
      if (this.ended) {
        if (this.buffer.length === 0) return null;
        throw new Error("the stream ended inside a message");
      }
      await this.more();
    }
  }

  async exactly(count: number): Promise<Buffer> {
    while (this.buffer.length < count) {
      if (this.ended) throw new Error("the stream ended inside a body");
      await this.more();
    }
    return this.take(count);
  }

  private take(count: number): Buffer {
    const taken = this.buffer.subarray(0, count);
    this.buffer = this.buffer.subarray(count);
    return taken;
  }

  private more(): Promise<void> {
    return new Promise((done) => (this.wake = done));
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}

/** One HTTP/1.1 message as its raw bytes (to relay unchanged); null at a clean end of stream.
 * `responseTo`: the request's method when this is its answer (a HEAD's answer has no body). */
async function readMessage(reader: ByteReader, responseTo?: string): Promise<Message | null> {
  const head = await reader.until("\r\n\r\n");
  if (!head) return null;
  const [firstLine = "", ...lines] = head.toString("latin1").split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines.filter(Boolean)) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const parts = [head];
  const status = Number(firstLine.split(" ")[1]);
  const bodiless = responseTo !== undefined && (responseTo === "HEAD" || status < 200 || status === 204 || status === 304);
  if (!bodiless && headers["transfer-encoding"]?.toLowerCase() === "chunked") parts.push(...(await chunks(reader)));
  else if (!bodiless && headers["content-length"] !== undefined) parts.push(await reader.exactly(Number(headers["content-length"])));
  return { raw: Buffer.concat(parts), firstLine, headers };
}

/** A chunked body, framing included, up to and with its last (empty) chunk and trailers. */
async function chunks(reader: ByteReader): Promise<Buffer[]> {
  const parts: Buffer[] = [];
  for (;;) {
    const sizeLine = await reader.until("\r\n");
    if (!sizeLine) throw new Error("the stream ended inside a chunked body");
    parts.push(sizeLine);
    const size = parseInt(sizeLine.toString("latin1").split(";")[0] ?? "", 16);
    if (size === 0) {
      for (let trailer = await reader.until("\r\n"); ; trailer = await reader.until("\r\n")) {
        if (!trailer) throw new Error("the stream ended inside trailers");
        parts.push(trailer);
        if (trailer.length === 2) return parts;
      }
    }
    parts.push(await reader.exactly(size + 2));
  }
}
