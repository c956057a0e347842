/**
 * `Batch`: writes across an invocation's scopes applied all together or not at all
 * (`POST /v0/state/batch`, spec "Atomic batch").
 *
 * Each op is checked and encoded when it is added, so a bad value throws at the line that added it;
 * `commit()` sends them in one request, with its own idempotency key: a commit whose answer was lost
 * is sent again and still applied once. A failed `ifVersion` is one `VersionConflict` whose
 * `conflicts` lists every op that failed (`{index, scope, key, currentVersion}`); any other error
 * carries the `index` of the first op that caused it. Either way nothing was written.
 */

import { InvalidRequest } from "./errors.js";
import type { Expiry, Guard, ScopeName, WriteFields, WriteOp } from "./state-calls.js";
import { jsonObject, writeFields } from "./state-calls.js";
import type { Sender } from "./transport.js";
import { idempotent } from "./transport.js";
import { checkKey } from "./values.js";

export const MAX_BATCH_OPS = 100;

/** What each op answers, in order: what that call alone answers (`{}` for a delete). */
export type BatchResult = { version?: number; length?: number; value?: any };

export class Batch {
  private readonly ops: string[] = [];

  constructor(
    private readonly sender: Sender,
    private readonly token: string,
  ) {}

  /** How many ops were added. */
  get size(): number {
    return this.ops.length;
  }

  put(scope: ScopeName, key: string, value: unknown, options: Guard & Expiry = {}): this {
    return this.add("put", scope, key, writeFields.put(value, options));
  }

  delete(scope: ScopeName, key: string, options: Guard = {}): this {
    return this.add("delete", scope, key, writeFields.delete(options));
  }

  append(scope: ScopeName, key: string, items: unknown[], options: Expiry = {}): this {
    return this.add("append", scope, key, writeFields.append(items, options));
  }

  incr(scope: ScopeName, key: string, options: { by?: number } & Guard & Expiry = {}): this {
    return this.add("incr", scope, key, writeFields.incr(options));
  }

  patch(scope: ScopeName, key: string, change: unknown, options: Guard & Expiry = {}): this {
    return this.add("patch", scope, key, writeFields.patch(change, options));
  }

  trim(scope: ScopeName, key: string, keepLast: number, options: Guard & Expiry = {}): this {
    return this.add("trim", scope, key, writeFields.trim(keepLast, options));
  }

  /** Send every op in one request; their results in order. Nothing is written unless all succeed. */
  commit(): Promise<BatchResult[]> {
    if (this.ops.length === 0) throw new InvalidRequest("a batch needs at least one op");
    const body = `{"ops":[${this.ops.join(",")}]}`;
    return this.sender.send(idempotent({
      method: "POST", path: "/v0/state/batch", body, token: this.token,
      parse: (answer: any) => answer.results as BatchResult[],
    }));
  }

  private add(op: WriteOp, scope: ScopeName, key: string, fields: WriteFields): this {
    if (this.ops.length >= MAX_BATCH_OPS) throw new InvalidRequest(`a batch holds at most ${MAX_BATCH_OPS} ops`);
    this.ops.push(jsonObject({ op, scope, key: checkKey(key), ...fields.plain }, fields.encoded));
    return this;
  }
}
