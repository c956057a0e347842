/**
 * A `fetch` for the one kind of path that `fetch` itself cannot send: a segment `%2E` or `%2E%2E`.
 *
 * `.` and `..` are valid keys, sent percent-encoded so that they stay keys. But every WHATWG URL
 * parser (the one inside `fetch`, in Node.js, Deno, Bun and browsers) treats `%2E` and `%2E%2E` as
 * the path steps `.` and `..` and removes them, so `GET .../state/{agent}/%2E` would silently read
 * the key *listing* instead of the key. For those paths only, the request goes out through Node's
 * own `http` module, which sends the path as written. Where there is no `node:http` (a browser),
 * such a key is refused with `InvalidKey` rather than sent to the wrong place.
 */

import { InvalidKey } from "./errors.js";
import type { FetchLike } from "./transport.js";

const DOT_SEGMENT = /\/(?:%2E){1,2}(?=\/|$)/i;

/** True when a WHATWG URL parser would rewrite `path`. */
export function needsRawPath(path: string): boolean {
  return DOT_SEGMENT.test(path);
}

interface NodeHttp {
  request(url: URL, options: object, answer: (response: NodeAnswer) => void): NodeRequest;
}

interface NodeAnswer {
  statusCode?: number;
  headers: Record<string, string | string[] | undefined>;
  on(event: "data", listener: (chunk: Uint8Array) => void): void;
  on(event: "end" | "error", listener: (error?: Error) => void): void;
}

interface NodeRequest {
  on(event: "error", listener: (error: Error) => void): void;
  end(body?: string): void;
}

async function nodeHttp(scheme: string): Promise<NodeHttp> {
  try {
    return (await import(scheme === "https:" ? "node:https" : "node:http")) as NodeHttp;
  } catch {
    throw new InvalidKey("the keys '.' and '..' cannot be sent by fetch (URLs read them as path steps): use another key");
  }
}

function answerHeaders(raw: NodeAnswer["headers"]): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(raw)) {
    for (const one of Array.isArray(value) ? value : value === undefined ? [] : [value]) headers.append(name, one);
  }
  return headers;
}

/** `fetch` over `node:http`, sending the path of `url` exactly as written. Errors look like fetch's (`cause.code`). */
export const rawPathFetch: FetchLike = async (url, init) => {
  const origin = new URL(url).origin;
  const http = await nodeHttp(new URL(origin).protocol);
  return new Promise<Response>((resolve, reject) => {
    const failed = (error: Error) => reject(Object.assign(new TypeError("fetch failed"), { cause: error }));
    const options = { method: init.method, headers: init.headers, path: url.slice(origin.length), signal: init.signal };
    const request = http.request(new URL(origin), options, (answer) => {
      const chunks: Uint8Array[] = [];
      answer.on("data", (chunk) => chunks.push(chunk));
      answer.on("error", (error) => failed(error ?? new Error("answer aborted")));
      answer.on("end", () => {
        const status = answer.statusCode ?? 502;
        const body = status === 204 || status === 304 ? null : new Blob(chunks);
        resolve(new Response(body, { status, headers: answerHeaders(answer.headers) }));
      });
    });
    request.on("error", failed);
    request.end(typeof init.body === "string" ? init.body : undefined);
  });
};
