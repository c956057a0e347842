/**
 * `Scope`: the calls on one scope's state, the same for an invocation (`inv.state.session`) and a
 * caller (`client.state.session(id, agent)`); only the `Target` differs.
 *
 * The rules that do not depend on the wire live here, as in the Python SDK's `scope.py`: defaults
 * for absent keys, paging of `keys`, and `update`'s compare-and-set loop (read, apply, write with
 * `ifVersion`; on a conflict wait a jittered, growing moment and try again, 64 times at most).
 */

import { VersionConflict } from "./errors.js";
import * as calls from "./state-calls.js";
import type { Expiry, Guard, ListPart, ListWrite, Once, Popped, Target, Versioned, Written } from "./state-calls.js";
import type { Sender } from "./transport.js";
import { sleep } from "./transport.js";

export const UPDATE_TRIES = 64;
const KEYS_PAGE = 100;

/** Compare-and-set backoff: a random wait up to 0.5 ms × 2^attempt, capped at 50 ms. */
export function updateBackoff(attempt: number): number {
  return Math.random() * Math.min(0.05, 0.0005 * 2 ** attempt);
}

export class Scope {
  constructor(
    private readonly sender: Sender,
    private readonly target: Target,
  ) {}

  /** The value, or `fallback` (default undefined) when the key is absent. */
  async get<T = any>(key: string, fallback?: unknown): Promise<T> {
    const found = await this.getVersioned(key);
    return (found.version === 0 ? fallback : found.value) as T;
  }

  /** The value and its version; `{value: undefined, version: 0}` when absent. */
  getVersioned<T = any>(key: string): Promise<Versioned<T>> {
    return this.sender.send(calls.get(this.target, key));
  }

  /**
   * Write `value`; the new version. `ifVersion: 0`: only if absent. Throws `VersionConflict` (`currentVersion`).
   * Every write takes `idempotencyKey` (`Once`): a repeat with it gets the first answer and writes nothing.
   */
  put(key: string, value: unknown, options: Guard & Expiry & Once = {}): Promise<number> {
    return this.sender.send(calls.put(this.target, key, value, options));
  }

  /** Delete the key (also when absent). Throws `VersionConflict` when `ifVersion` does not match. */
  delete(key: string, options: Guard & Once = {}): Promise<void> {
    return this.sender.send(calls.remove(this.target, key, options));
  }

  /** Add `items` at the end of the list atomically, creating it if needed. `NotAList`, `TooLarge`. */
  append(key: string, items: unknown[], options: Expiry & Once = {}): Promise<ListWrite> {
    return this.sender.send(calls.append(this.target, key, items, options));
  }

  /**
   * Compare-and-set loop: read, apply `fn`, write if nobody wrote in between, else again.
   * `fn` may run more than once: keep it free of side effects. The new value.
   */
  update<T>(key: string, fn: (current: T) => T | Promise<T>, options: { default: T }): Promise<T>;
  update<T>(key: string, fn: (current: T | undefined) => T | Promise<T>): Promise<T>;
  async update<T>(key: string, fn: (current: T) => T | Promise<T>, options?: { default: T }): Promise<T> {
    for (let attempt = 0; attempt < UPDATE_TRIES; attempt++) {
      const current = await this.getVersioned<T>(key);
      const next = await fn((current.version === 0 ? options?.default : current.value) as T);
      try {
        await this.put(key, next, { ifVersion: current.version });
        return next;
      } catch (error) {
        if (!(error instanceof VersionConflict)) throw error;
        await sleep(updateBackoff(attempt));
      }
    }
    throw new VersionConflict(`update of ${JSON.stringify(key)} kept conflicting after ${UPDATE_TRIES} tries`);
  }

  /** Every `{key, version}` starting with `prefix`, in key order, fetched 100 at a time. */
  async *keys(options: { prefix?: string } = {}): AsyncGenerator<{ key: string; version: number }, void, undefined> {
    let after: string | undefined;
    do {
      const page = await this.sender.send(calls.keysPage(this.target, options.prefix ?? "", after, KEYS_PAGE));
      yield* page.keys;
      after = page.next ?? undefined;
    } while (after !== undefined);
  }

  /** The last `n` items of a list (1–1000), its version and length; an absent key reads as an empty list. */
  tail<T = any>(key: string, n: number): Promise<ListPart<T>> {
    return this.sender.send(calls.tail(this.target, key, n));
  }

  /** Items `start` … `start + limit - 1` (from 0; `limit` ≤ 1000); an absent key reads as an empty list. */
  items<T = any>(key: string, range: { start: number; limit: number }): Promise<ListPart<T>> {
    return this.sender.send(calls.items(this.target, key, range.start, range.limit));
  }

  /** Drop the oldest items so that at most `keepLast` remain. */
  trim(key: string, keepLast: number, options: Guard & Expiry & Once = {}): Promise<ListWrite> {
    return this.sender.send(calls.trim(this.target, key, keepLast, options));
  }

  /** Remove and return the last item; undefined when the list is absent or empty. */
  pop<T = any>(key: string, options: Guard & Once = {}): Promise<Popped<T> | undefined> {
    return this.sender.send(calls.pop(this.target, key, options));
  }

  /** Add `by` (default 1) to an integer in the store; an absent key counts from 0. `NotAnInteger`. */
  incr(key: string, options: { by?: number } & Guard & Expiry & Once = {}): Promise<Written<number>> {
    return this.sender.send(calls.incr(this.target, key, options));
  }

  /** Apply a JSON Merge Patch (RFC 7396) in the store; an absent key is `{}`. */
  patch<T = any>(key: string, change: unknown, options: Guard & Expiry & Once = {}): Promise<Written<T>> {
    return this.sender.send(calls.patch(this.target, key, change, options));
  }
}
