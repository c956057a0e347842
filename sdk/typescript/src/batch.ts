/**
 * `Batch`: writes across an invocation's scopes applied all together or not at all
 * (`POST /v0/state/batch`, spec "Atomic batch").
 *
 * Each op is checked and encoded when it is added, so a bad value throws at the line that added it;
 * `commit()` sends them in one request. A failed `ifVersion` is one `VersionConflict` whose
 * `conflicts` lists every op that failed (`{index, scope, key, currentVersion}`); any other error
 * carries the `index` of the first op that caused it. Either way nothing was written.
 */

import { InvalidRequest } from "./errors.js";
import type { Expiry, Guard, ScopeName } from "./state-calls.js";
import { guardFields, jsonObject } from "./state-calls.js";
import type { Sender } from "./transport.js";
import { checkCount, checkKey, checkSeconds, encodeItems, encodeSized } from "./values.js";

export const MAX_BATCH_OPS = 100;

/** What each op answers, in order: what that call alone answers (`{}` for a delete). */
export type BatchResult = { version?: number; length?: number; value?: any };

export class Batch {
  private readonly ops: string[] = [];
  private guarded = true;

  constructor(
    private readonly sender: Sender,
    private readonly token: string,
  ) {}

  /** How many ops were added. */
  get size(): number {
    return this.ops.length;
  }

  put(scope: ScopeName, key: string, value: unknown, options: Guard & Expiry = {}): this {
    return this.add("put", scope, key, guardFields(options), { value: encodeSized(value) });
  }

  delete(scope: ScopeName, key: string, options: Guard = {}): this {
    return this.add("delete", scope, key, { if_version: checkCount(options.ifVersion, "ifVersion") });
  }

  append(scope: ScopeName, key: string, items: unknown[], options: Expiry = {}): this {
    const fields = { ttl_seconds: checkSeconds(options.ttlSeconds, "ttlSeconds") };
    return this.add("append", scope, key, fields, { items: encodeItems(items) });
  }

  incr(scope: ScopeName, key: string, options: { by?: number } & Guard & Expiry = {}): this {
    const by = options.by ?? 1;
    if (!Number.isSafeInteger(by)) throw new InvalidRequest("by must be an integer");
    return this.add("incr", scope, key, { by, ...guardFields(options) });
  }

  patch(scope: ScopeName, key: string, change: unknown, options: Guard & Expiry = {}): this {
    return this.add("patch", scope, key, guardFields(options), { patch: encodeSized(change, "patch") });
  }

  trim(scope: ScopeName, key: string, keepLast: number, options: Guard & Expiry = {}): this {
    return this.add("trim", scope, key, { keep_last: checkCount(keepLast, "keepLast"), ...guardFields(options) });
  }

  /** Send every op in one request; their results in order. Nothing is written unless all succeed. */
  commit(): Promise<BatchResult[]> {
    if (this.ops.length === 0) throw new InvalidRequest("a batch needs at least one op");
    const body = `{"ops":[${this.ops.join(",")}]}`;
    return this.sender.send({
      method: "POST", path: "/v0/state/batch", body, token: this.token, safe: this.guarded,
      parse: (answer: any) => answer.results as BatchResult[],
    });
  }

  private add(op: string, scope: ScopeName, key: string, fields: Record<string, unknown>, encoded = {}): this {
    if (this.ops.length >= MAX_BATCH_OPS) throw new InvalidRequest(`a batch holds at most ${MAX_BATCH_OPS} ops`);
    this.ops.push(jsonObject({ op, scope, key: checkKey(key), ...fields }, encoded));
    this.guarded &&= fields["if_version"] !== undefined; // every op guarded: a repeat cannot apply twice
    return this;
  }
}
