/**
 * Keys and JSON values, checked before they leave the process, with the server's rules and errors.
 *
 * The server refuses NaN and ±Infinity, integers outside signed 64-bit, U+0000 and lone surrogates
 * in strings and object keys, and nesting deeper than 128 levels, each as `invalid_value` with the
 * JSON path of the first bad place. `JSON.stringify` would silently write NaN as `null` and a `Map`
 * as `{}`, so a value is walked once before it is encoded: a bad one is refused here, with the same
 * class and path, and never sent. Plain JSON semantics hold otherwise (`toJSON` is honoured, an
 * `undefined` object property is left out).
 *
 * JavaScript numbers are float64: integers past 2^53 lose precision on the way in and out. Write
 * ids and amounts as strings.
 */

import { InvalidKey, InvalidRequest, InvalidValue, TooLarge } from "./errors.js";

export const MAX_VALUE_BYTES = 1024 * 1024;
export const MAX_DEPTH = 128;
const KEY = /^[A-Za-z0-9._:-]{1,200}$/;
const BAD_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const INT64_LIMIT = 2 ** 63;
/** From here on `JSON.stringify` writes numbers with an exponent, which the server reads as float64. */
const EXPONENT_FROM = 1e21;

/** `key` when it is 1–200 of `A-Z a-z 0-9 . _ : -`; else `InvalidKey`. */
export function checkKey(key: unknown, what = "key"): string {
  if (typeof key !== "string" || !KEY.test(key)) {
    const shown = typeof key === "string" ? JSON.stringify(key.slice(0, 80)) : String(key);
    throw new InvalidKey(`${what} must be 1-200 of A-Z a-z 0-9 . _ : -, got ${shown}`);
  }
  return key;
}

/**
 * The JSON text of `value`, after checking it as the server would; `InvalidValue` with `path`.
 * A quick walk clears a good value without building paths; only a bad one is walked again, with
 * paths, to say where (as the Python SDK scans bytes first and walks only on doubt).
 */
export function encode(value: unknown, path = "$"): string {
  const own = toJson(value, "");
  const checked = isClean(own, 1) ? own : check(value, "", path, 1);
  if (checked === undefined) throw new InvalidValue("undefined is not a JSON value: use null", { path });
  return JSON.stringify(checked);
}

/** `encode`, refusing a result over 1 MiB (UTF-8) with `TooLarge`. */
export function encodeSized(value: unknown, what = "value", path = "$"): string {
  const text = encode(value, path);
  checkSize(utf8Length(text), what);
  return text;
}

/** The items of an append, each encoded (a bad one named by its `$[i]` path), with their list's size checked. */
export function encodeItems(items: unknown): string {
  if (!Array.isArray(items)) throw new InvalidRequest("items must be a list");
  const text = `[${items.map((item, index) => encode(item, `$[${index}]`)).join(",")}]`;
  checkSize(utf8Length(text), "the appended items");
  return text;
}

export function checkSize(size: number, what = "value"): void {
  if (size > MAX_VALUE_BYTES) {
    throw new TooLarge(`${what} is ${size} bytes, over the limit of ${MAX_VALUE_BYTES}`);
  }
}

/** Bytes of `text` in UTF-8, without building them. */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0x80) bytes += unit < 0x800 || (unit >= 0xd800 && unit < 0xe000) ? 1 : 2;
  }
  return bytes;
}

/** A non-negative integer, or undefined; else `InvalidRequest` naming `what`. */
export function checkCount(value: number | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value < 0) throw new InvalidRequest(`${what} must be a non-negative integer`);
  return value;
}

/** `incr`'s step: an integer inside signed 64-bit (exact only up to 2^53, as every JS number); default 1. */
export function checkBy(by: number | undefined): number {
  if (by === undefined) return 1;
  if (!Number.isInteger(by) || Math.abs(by) >= INT64_LIMIT) throw new InvalidRequest("by must be an integer inside signed 64-bit");
  return by;
}

/** A number of seconds > 0, or undefined; else `InvalidRequest` naming `what`. */
export function checkSeconds(value: number | undefined, what: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new InvalidRequest(`${what} must be a number of seconds > 0`);
  }
  return value;
}

/** Any character that may make a string bad (the precise test is `BAD_TEXT`). */
const SUSPECT_TEXT = /[\u0000\ud800-\udfff]/;

/** True when `node` (already through `toJSON`) holds nothing the server refuses; false on any doubt. */
function isClean(node: unknown, depth: number): boolean {
  switch (typeof node) {
    case "string":
      return !SUSPECT_TEXT.test(node);
    case "number":
      return Number.isFinite(node) && (!Number.isInteger(node) || Math.abs(node) < INT64_LIMIT || Math.abs(node) >= EXPONENT_FROM);
    case "boolean":
      return true;
    case "object":
      return node === null || isCleanContainer(node, depth);
    default:
      return false; // undefined, bigint, functions, symbols: let the precise walk decide
  }
}

function isCleanContainer(node: object, depth: number): boolean {
  if (depth > MAX_DEPTH || node instanceof Map || node instanceof Set) return false;
  if (Array.isArray(node)) {
    for (let i = 0; i < node.length; i++) if (!isClean(toJson(node[i], String(i)), depth + 1)) return false;
    return true;
  }
  const record = node as Record<string, unknown>;
  for (const name of Object.keys(record)) {
    if (SUSPECT_TEXT.test(name) || !isClean(toJson(record[name], name), depth + 1)) return false;
  }
  return true;
}

/** What `JSON.stringify` would write for `value` (after `toJSON`), checked; undefined when it would leave it out. */
function check(value: unknown, key: string, path: string, depth: number): unknown {
  const own = toJson(value, key);
  switch (typeof own) {
    case "string":
      return checkText(own, path, "string");
    case "number":
      return checkNumber(own, path);
    case "boolean":
      return own;
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
    case "bigint":
      throw new InvalidValue("a bigint is not a JSON value: write it as a string", { path });
    default:
      return own === null ? null : checkContainer(own as object, path, depth);
  }
}

function toJson(value: unknown, key: string): unknown {
  const method = value !== null && typeof value === "object" ? (value as { toJSON?: unknown }).toJSON : undefined;
  return typeof method === "function" ? (method as (key: string) => unknown).call(value, key) : value;
}

function checkText(text: string, path: string, what: string): string {
  if (BAD_TEXT.test(text)) {
    const problem = text.includes("\u0000") ? "holds U+0000" : "holds a lone surrogate";
    throw new InvalidValue(`${what} ${problem}`, { path });
  }
  return text;
}

function checkNumber(number: number, path: string): number {
  if (!Number.isFinite(number)) throw new InvalidValue("NaN and Infinity are not JSON", { path });
  const magnitude = Math.abs(number);
  if (Number.isInteger(number) && magnitude >= INT64_LIMIT && magnitude < EXPONENT_FROM) {
    throw new InvalidValue("integer outside signed 64-bit", { path });
  }
  return number;
}

function checkContainer(node: object, path: string, depth: number): object {
  if (depth > MAX_DEPTH) throw new InvalidValue(`nesting deeper than ${MAX_DEPTH} levels (or a cycle)`, { path });
  if (node instanceof Map || node instanceof Set) {
    throw new InvalidValue(`a ${node.constructor.name} is not a JSON value: use an object or an array`, { path });
  }
  if (Array.isArray(node)) {
    node.forEach((item, index) => check(item, String(index), `${path}[${index}]`, depth + 1));
    return node;
  }
  for (const [name, inner] of Object.entries(node)) {
    const innerPath = KEY.test(name) ? `${path}.${name}` : `${path}[${JSON.stringify(name)}]`;
    checkText(name, innerPath, "object key");
    check(inner, name, innerPath, depth + 1);
  }
  return node;
}
