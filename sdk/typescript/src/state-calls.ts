/**
 * Every state request as a `Call`, for either kind of route: an invocation's
 * (`/v0/state/{scope}/...` with its run token) or a caller's (`/v0/sessions/{id}/state/{agent}/...`
 * and the other prefixes of "State for callers", with the client's key). Both take the same bodies
 * and give the same answers, so one set of builders serves both; a `Target` says where and how.
 *
 * Reads are safe to repeat; every write is `idempotent`: it carries its own `Idempotency-Key`, so it
 * is retried after a lost answer and still applied once — a `pop` pops one item and answers it,
 * however many attempts reach the server.
 */

import type { Call, Method } from "./transport.js";
import { idempotent, query, segment } from "./transport.js";
import { checkBy, checkCount, checkKey, checkSeconds, encodeItems, encodeSized } from "./values.js";

/** Where one scope's state lives and which credential reaches it. */
export interface Target {
  /** The path of `key` (checked and encoded). */
  keyPath(key: string): string;
  /** The path that lists the scope's keys. */
  readonly listPath: string;
  /** The run token, for an invocation's scopes; undefined: the client's key. */
  readonly token: string | undefined;
}

export type ScopeName = "run" | "session" | "agent" | "user";

/** An invocation's scope: `/v0/state/{scope}/{key}` with its run token. */
export function runTokenTarget(scope: ScopeName, token: string): Target {
  const listPath = `/v0/state/${segment(scope)}`;
  return { listPath, token, keyPath: (key) => `${listPath}/${segment(checkKey(key))}` };
}

/** A caller's scope under `prefix` (which ends with `/`): `{prefix}{key}` with the client's key. */
export function callerTarget(prefix: string): Target {
  return { listPath: prefix, token: undefined, keyPath: (key) => `${prefix}${segment(checkKey(key))}` };
}

/** A value with its version; `{value: undefined, version: 0}` when absent. `expiresAt` (ms) for a key that expires. */
export interface Versioned<T = any> {
  value: T | undefined;
  version: number;
  expiresAt?: number;
}

/** A list's new version and length after a write. */
export interface ListWrite {
  version: number;
  length: number;
}

/** Part of a list, its version and its whole length. */
export interface ListPart<T = any> extends ListWrite {
  items: T[];
}

/** A popped item and the list after it. */
export interface Popped<T = any> extends ListWrite {
  item: T;
}

/** A value the store computed (`incr`, `patch`) and its new version. */
export interface Written<T = any> {
  value: T;
  version: number;
}

export interface Guard {
  ifVersion?: number;
}

/**
 * Apply a write once per key: a repeat with the same `idempotencyKey` (another process's, after a
 * restart) gets the first answer and writes nothing. Without it each call carries a fresh key of its own.
 */
export interface Once {
  idempotencyKey?: string;
}

export interface Expiry {
  /** Seconds until the key expires (> 0). Without it a `put` clears any expiry; other writes keep it. */
  ttlSeconds?: number;
}

/** A JSON object from plain fields (undefined ones left out) and fields already encoded as JSON text. */
export function jsonObject(plain: Record<string, unknown>, encoded: Record<string, string> = {}): string {
  const parts = Object.entries(plain).filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${JSON.stringify(name)}:${JSON.stringify(value)}`);
  for (const [name, text] of Object.entries(encoded)) parts.push(`${JSON.stringify(name)}:${text}`);
  return `{${parts.join(",")}}`;
}

/** The body fields of one write: plain ones, and values already encoded as JSON text. */
export interface WriteFields {
  plain: Record<string, unknown>;
  encoded: Record<string, string>;
}

export type WriteOp = "put" | "delete" | "append" | "incr" | "patch" | "trim";

function guardFields(options: Guard & Expiry): Record<string, number | undefined> {
  return {
    if_version: checkCount(options.ifVersion, "ifVersion"),
    ttl_seconds: checkSeconds(options.ttlSeconds, "ttlSeconds"),
  };
}

/**
 * The checked body fields of each write, shared by its own route and by a batch op (spec: a batch
 * op carries "that call's body fields beside it").
 */
export const writeFields = {
  put: (value: unknown, options: Guard & Expiry): WriteFields =>
    ({ plain: guardFields(options), encoded: { value: encodeSized(value) } }),
  delete: (options: Guard): WriteFields => ({ plain: { if_version: checkCount(options.ifVersion, "ifVersion") }, encoded: {} }),
  append: (items: unknown[], options: Expiry): WriteFields =>
    ({ plain: { ttl_seconds: checkSeconds(options.ttlSeconds, "ttlSeconds") }, encoded: { items: encodeItems(items) } }),
  incr: (options: { by?: number } & Guard & Expiry): WriteFields =>
    ({ plain: { by: checkBy(options.by), ...guardFields(options) }, encoded: {} }),
  patch: (change: unknown, options: Guard & Expiry): WriteFields =>
    ({ plain: guardFields(options), encoded: { patch: encodeSized(change, "patch") } }),
  trim: (keepLast: number, options: Guard & Expiry): WriteFields =>
    ({ plain: { keep_last: checkCount(keepLast, "keepLast"), ...guardFields(options) }, encoded: {} }),
} satisfies Record<WriteOp, (...args: never[]) => WriteFields>;

/** A write's `Call`: its body from `fields`, with the caller's idempotency key or a fresh one. */
function write<T>(
  target: Target, method: Method, path: string, fields: WriteFields, parse: (answer: any) => T, once: Once,
): Call<T> {
  return idempotent(call(target, method, path, parse, { body: jsonObject(fields.plain, fields.encoded) }), keyOf(once));
}

function keyOf(once: Once): string | undefined {
  return once.idempotencyKey === undefined ? undefined : checkKey(once.idempotencyKey, "idempotencyKey");
}

function call<T>(target: Target, method: Method, path: string, parse: (answer: any) => T, extra: Partial<Call<T>>): Call<T> {
  return { method, path, parse, token: target.token, ...extra };
}

const listWrite = (answer: any): ListWrite => ({ version: answer.version, length: answer.length });
const written = (answer: any): Written => ({ value: answer.value, version: answer.version });
const emptyList = (): ListPart => ({ items: [], version: 0, length: 0 });

export function get(target: Target, key: string): Call<Versioned> {
  const parse = (answer: any): Versioned => {
    const found: Versioned = { value: answer.value, version: answer.version };
    if (typeof answer.expires_at === "number") found.expiresAt = answer.expires_at;
    return found;
  };
  return call(target, "GET", target.keyPath(key), parse, { safe: true, absent: () => ({ value: undefined, version: 0 }) });
}

export function put(target: Target, key: string, value: unknown, options: Guard & Expiry & Once): Call<number> {
  const path = target.keyPath(key);
  return write(target, "PUT", path, writeFields.put(value, options), (answer) => answer.version as number, options);
}

export function remove(target: Target, key: string, options: Guard & Once): Call<void> {
  const path = target.keyPath(key);
  const params = query(writeFields.delete(options).plain as Record<string, number | undefined>);
  return idempotent(call(target, "DELETE", path, () => undefined, { params }), keyOf(options));
}

export function append(target: Target, key: string, items: unknown[], options: Expiry & Once): Call<ListWrite> {
  const path = `${target.keyPath(key)}/append`;
  return write(target, "POST", path, writeFields.append(items, options), listWrite, options);
}

export function keysPage(target: Target, prefix: string, after: string | undefined, limit: number): Call<{ keys: { key: string; version: number }[]; next: string | null }> {
  const params = query({ prefix: prefix || undefined, after, limit });
  const parse = (answer: any) => ({
    keys: (answer.keys as { key: string; version: number }[]).map(({ key, version }) => ({ key, version })),
    next: (answer.next ?? null) as string | null,
  });
  return call(target, "GET", target.listPath, parse, { params, safe: true });
}

export function tail(target: Target, key: string, n: number): Call<ListPart> {
  const params = query({ tail: checkCount(n, "n") });
  return call(target, "GET", target.keyPath(key), listPart, { params, safe: true, absent: emptyList });
}

export function items(target: Target, key: string, start: number, limit: number): Call<ListPart> {
  const params = query({ start: checkCount(start, "start"), limit: checkCount(limit, "limit") });
  return call(target, "GET", target.keyPath(key), listPart, { params, safe: true, absent: emptyList });
}

function listPart(answer: any): ListPart {
  return { items: answer.items, version: answer.version, length: answer.length };
}

export function trim(target: Target, key: string, keepLast: number, options: Guard & Expiry & Once): Call<ListWrite> {
  const path = `${target.keyPath(key)}/trim`;
  return write(target, "POST", path, writeFields.trim(keepLast, options), listWrite, options);
}

export function pop(target: Target, key: string, options: Guard & Once): Call<Popped | undefined> {
  const path = `${target.keyPath(key)}/pop`;
  const parse = (answer: any): Popped => ({ item: answer.item, version: answer.version, length: answer.length });
  // A pop's body is a delete's: only `if_version`.
  return { ...write(target, "POST", path, writeFields.delete(options), parse, options), absent: () => undefined };
}

export function incr(
  target: Target, key: string, options: { by?: number } & Guard & Expiry & Once,
): Call<Written<number>> {
  return write(target, "POST", `${target.keyPath(key)}/incr`, writeFields.incr(options), written, options);
}

export function patch(target: Target, key: string, change: unknown, options: Guard & Expiry & Once): Call<Written> {
  return write(target, "PATCH", target.keyPath(key), writeFields.patch(change, options), written, options);
}
