/**
 * `inv.memory`: the agent's long-lived knowledge, documents by path with full-text search, as the
 * run's end user sees it (its folder `users/{user}/`, and everything outside `users/`). The same
 * five calls as the Python SDK's `inv.memory`, in camelCase: `read`, `write`, `delete`, `list`,
 * `search`.
 *
 * A path is sent segment by segment, each percent-encoded, so its `/` stay separators, `{user}`
 * arrives as written, and a `.` or `..` segment is sent encoded (the transport sends such paths
 * byte for byte) for the server to refuse, never resolved away on the way.
 */

import { InvalidRequest } from "./errors.js";
import type { Call, Method, Sender } from "./transport.js";
import { query, segment } from "./transport.js";
import { checkCount, encode } from "./values.js";

/** A document as read: its full path (a user's folder named), text, metadata, version and last write (ms). */
export interface Document {
  path: string;
  text: string;
  metadata: Record<string, any>;
  version: number;
  updatedAt: number;
}

/** A listed document. */
export interface DocumentInfo {
  path: string;
  version: number;
  updatedAt: number;
}

/**
 * A search result: a higher `score` is better. By words, `snippet` is text around the matches, matched
 * words between `**`; by meaning, `score` is the cosine similarity and `snippet` the nearest passage.
 */
export interface Hit {
  path: string;
  score: number;
  snippet: string;
  version: number;
}

/** How a search finds documents: by words, by meaning, or both fused. */
export type SearchMode = "text" | "semantic" | "hybrid";

/** A search's options (all optional). */
export interface SearchOptions {
  mode?: SearchMode;
  filter?: Record<string, string | number | boolean | null>;
  prefix?: string;
  limit?: number;
}

const PREFIX = "/v0/memory";
const LIST_PAGE = 100;

function documentPath(path: string): string {
  if (typeof path !== "string" || path === "") {
    throw new InvalidRequest("path must be 1-512 of A-Z a-z 0-9 . _ - / in segments, like notes/today");
  }
  return `${PREFIX}/${path.split("/").map(segment).join("/")}`;
}

function parseDocument(answer: any): Document {
  return { path: answer.path, text: answer.text, metadata: answer.metadata ?? {}, version: answer.version,
    updatedAt: answer.updated_at };
}

function parseInfo(answer: any): DocumentInfo {
  return { path: answer.path, version: answer.version, updatedAt: answer.updated_at };
}

function parseHit(answer: any): Hit {
  return { path: answer.path, score: answer.score, snippet: answer.snippet, version: answer.version };
}

export class Memory {
  constructor(
    private readonly sender: Sender,
    private readonly token: string,
  ) {}

  private call<T>(method: Method, path: string, parse: (answer: any) => T, extra: Partial<Call<T>> = {}): Promise<T> {
    return this.sender.send({ method, path, parse, token: this.token, ...extra });
  }

  /** The document at `path`, or undefined when there is none (or it is in another user's folder). */
  read(path: string): Promise<Document | undefined> {
    return this.call("GET", documentPath(path), parseDocument, { safe: true, absent: () => undefined });
  }

  /**
   * Replace the document's text and metadata; the new version. `ifVersion: 0`: only if absent.
   * Throws `VersionConflict` (`currentVersion`), `TooLarge` past 1 MiB of text or 16 KiB of metadata.
   */
  write(path: string, text: string, options: { metadata?: Record<string, unknown>; ifVersion?: number } = {}): Promise<number> {
    const ifVersion = checkCount(options.ifVersion, "ifVersion");
    const body = encode({ text, metadata: options.metadata, if_version: ifVersion });
    return this.call("PUT", documentPath(path), (answer) => answer.version as number,
      { body, safe: ifVersion !== undefined });
  }

  /** Delete the document (nothing happens when there is none); `VersionConflict` when `ifVersion` does not match. */
  delete(path: string, options: { ifVersion?: number } = {}): Promise<void> {
    const ifVersion = checkCount(options.ifVersion, "ifVersion");
    return this.call("DELETE", documentPath(path), () => undefined,
      { params: query({ if_version: ifVersion }), safe: ifVersion !== undefined });
  }

  /** Every document whose path starts with `prefix`, in path order, fetched 100 at a time. */
  async *list(options: { prefix?: string } = {}): AsyncGenerator<DocumentInfo, void, undefined> {
    let after: string | undefined;
    do {
      const params = query({ prefix: options.prefix || undefined, after, limit: LIST_PAGE });
      const page = await this.call("GET", PREFIX, (answer) => ({
        documents: (answer.documents as unknown[]).map(parseInfo), next: (answer.next ?? undefined) as string | undefined,
      }), { params, safe: true });
      yield* page.documents;
      after = page.next;
    } while (after !== undefined);
  }

  /**
   * The best documents for `query`, best first (at most `limit`, default 10, at most 50). `mode`:
   * `"text"`, the documents holding every word and `"quoted phrase"` (a first line holding them ranks
   * above a passing mention); `"semantic"`, the documents nearest in meaning; `"hybrid"`, both, fused
   * by reciprocal rank. By default hybrid where the server has an embedder, else text; meaning without
   * one throws `NoEmbedder`. `filter`: only documents whose metadata has each of these fields with this
   * value. `InvalidRequest` for a malformed query.
   */
  search(query: string, options: SearchOptions = {}): Promise<Hit[]> {
    const body = encode({ query, prefix: options.prefix, limit: checkCount(options.limit, "limit"),
      mode: options.mode, filter: options.filter });
    return this.call("POST", `${PREFIX}/search`, (answer) => (answer.hits as unknown[]).map(parseHit),
      { body, safe: true });
  }
}
