/**
 * Every error the SDK throws: one root, `KeepstateError`, and one subclass per stable code.
 *
 * The server answers `{error: CODE, message, ...details}`; `fromWire` turns that back into the
 * class of that code, with the details as camelCase properties (`current_version` →
 * `currentVersion`), so code can branch with `instanceof` or on `code` alone. Errors the SDK finds
 * before sending (a bad key, NaN in a value) are the same classes the server would have answered.
 * A request that fails on the network is `Unavailable`: nothing from `fetch` reaches a caller.
 */

/** Details of an error, as sent by the server, with camelCase names. */
export type ErrorDetails = Record<string, unknown>;

/** One failed `ifVersion` of an atomic batch (`VersionConflict.conflicts`). */
export interface BatchConflict {
  index: number;
  scope: string;
  key: string;
  currentVersion: number;
}

const RESERVED = new Set(["name", "message", "stack", "cause", "code", "status", "details"]);

/** The root of every keepstate error: a stable `code`, the HTTP `status`, and the details. */
export class KeepstateError extends Error {
  static readonly code: string = "internal";
  static readonly status: number = 500;

  /** The spec's error code, e.g. `"version_conflict"`. */
  readonly code: string;
  /** The HTTP status that carries this code (the answer's, for an error from the server). */
  readonly status: number;
  /** Every detail the server sent beside `error` and `message`, camelCase. */
  readonly details: ErrorDetails;
  /** In a batch: the index of the op that caused the error. */
  declare readonly index?: number;

  constructor(message?: string, details: ErrorDetails = {}, options: { code?: string; status?: number } = {}) {
    const kind = new.target as typeof KeepstateError;
    super(message || options.code || kind.code);
    this.name = new.target.name;
    this.code = options.code ?? kind.code;
    this.status = options.status ?? kind.status;
    this.details = details;
    for (const [name, value] of Object.entries(details)) {
      if (!RESERVED.has(name)) Object.defineProperty(this, name, { value, enumerable: true });
    }
  }
}

/** The class of one code: instances carry `code` as its literal type, so each class is its own type. */
interface CodeClass<C extends string> {
  new (message?: string, details?: ErrorDetails, options?: { code?: string; status?: number }): KeepstateError & {
    readonly code: C;
  };
  readonly code: C;
  readonly status: number;
}

/** The base of the class for one code: every subclass below is one line, or a few with its details. */
function codeClass<C extends string>(code: C, status: number): CodeClass<C> {
  return class extends KeepstateError {
    static override readonly code = code;
    static override readonly status = status;
  } as unknown as CodeClass<C>;
}

export class InvalidKey extends codeClass("invalid_key", 400) {}

/** A value keepstate refuses to store; `path` is a JSON path to the first bad place, e.g. `$.items[3]`. */
export class InvalidValue extends codeClass("invalid_value", 400) {
  declare readonly path: string;
}

export class InvalidRequest extends codeClass("invalid_request", 400) {}
export class Unauthorized extends codeClass("unauthorized", 401) {}
export class Forbidden extends codeClass("forbidden", 403) {}
export class NotFound extends codeClass("not_found", 404) {}

/** An `ifVersion` did not match: `currentVersion` is 0 when the key is absent; a batch lists every `conflicts`. */
export class VersionConflict extends codeClass("version_conflict", 409) {
  declare readonly currentVersion: number;
  declare readonly conflicts?: BatchConflict[];
}

export class NotAList extends codeClass("not_a_list", 409) {}
export class NoSession extends codeClass("no_session", 409) {}
export class NoUser extends codeClass("no_user", 409) {}
/** A search by meaning (`semantic`, `hybrid`) where memory has no embedder: search with `mode: "text"`. */
export class NoEmbedder extends codeClass("no_embedder", 409) {}
export class SessionBusy extends codeClass("session_busy", 409) {}
export class NotHeld extends codeClass("not_held", 409) {}
export class NotAnInteger extends codeClass("not_an_integer", 409) {}
export class TooLarge extends codeClass("too_large", 413) {}

/** A write repeated with its idempotency key while the first is still applied, past 10 s: retried by the SDK. */
export class IdempotencyInFlight extends codeClass("idempotency_in_flight", 409) {}

/** An idempotency key used again for another write (route or body): nothing was written. */
export class IdempotencyMismatch extends codeClass("idempotency_mismatch", 422) {}

/** A session's lease was lost (another instance holds it now): nothing was written. */
export class LeaseLost extends codeClass("lease_lost", 409) {}

/** A session stayed locked by another instance for longer than the store's `waitMs`. */
export class SessionLocked extends codeClass("session_locked", 409) {}

/** The store or the server cannot be reached: retry later (`retryAfter` seconds), never replay an effect. */
export class Unavailable extends codeClass("unavailable", 503) {
  declare readonly retryAfter: number;
}

const CLASSES: readonly CodeClass<string>[] = [
  InvalidKey, InvalidValue, InvalidRequest, Unauthorized, Forbidden, NotFound, VersionConflict, NotAList,
  NoSession, NoUser, NoEmbedder, SessionBusy, NotHeld, NotAnInteger, TooLarge, Unavailable, LeaseLost,
  SessionLocked, IdempotencyInFlight, IdempotencyMismatch,
];

/** The class for each code; a code not listed here arrives as a plain `KeepstateError` with that code. */
export const ERRORS: ReadonlyMap<string, CodeClass<string>> = new Map(CLASSES.map((cls) => [cls.code, cls]));

/** `snake_case` → `camelCase`, in nested objects and arrays too (`conflicts[].current_version`). */
export function camelKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelKeys);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [name, inner] of Object.entries(value)) {
    out[name.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase())] = camelKeys(inner);
  }
  return out;
}

/**
 * The error a server answered with `status` and `body` (already parsed, or text when not JSON).
 * `retryAfter` is the `Retry-After` header, used when the body does not carry `retry_after`.
 */
export function fromWire(status: number, body: unknown, retryAfter?: number): KeepstateError {
  if (body === null || typeof body !== "object" || typeof (body as { error?: unknown }).error !== "string") {
    const text = typeof body === "string" ? body : JSON.stringify(body ?? "");
    return new KeepstateError(`HTTP ${status}: ${text.slice(0, 200)}`, {}, { status });
  }
  const { error: code, message, ...rest } = body as { error: string; message?: unknown };
  const details = camelKeys(rest) as ErrorDetails;
  const cls = ERRORS.get(code);
  if (cls === Unavailable && details["retryAfter"] === undefined) details["retryAfter"] = retryAfter ?? 1;
  const text = typeof message === "string" && message ? message : code;
  return cls ? new cls(text, details, { status }) : new KeepstateError(text, details, { code, status });
}
