/**
 * `SessionStore`: a runtime's per-session working state, kept by a keepstate server and shared by
 * every runtime instance and machine that talks to it, with `transact` serialising a whole async
 * operation per session. Its shape is the `SessionStore` interface a runtime plugs in
 * (`get`/`set`/`delete`/`touch`/`transact`), so it goes where a `MemorySessionStore` went.
 *
 * How `transact(id, operation)` holds a session: the server grants a lease with a fencing token
 * that only grows (the request waits there, up to 30 s at a time, never polling from here); a timer
 * renews it every third of its life while `operation` runs, however long; `set`/`delete`/`touch`
 * called inside the operation find the lease through `AsyncLocalStorage` and carry its fence, which
 * the server's store checks in the same atomic step as the write. When a renewal is refused (another
 * instance holds the session now) `transact` rejects with `LeaseLost` at once, and the operation's
 * later writes fail without being sent; when renewals cannot reach the server until the lease would
 * have run out, it rejects with `Unavailable`. The lease is released when the operation settles,
 * after any renewal in flight (a release before it could be undone by it). Waiting longer than
 * `waitMs` rejects with `SessionLocked`.
 *
 * `AsyncLocalStorage` is Node's (`node:async_hooks`, also in Deno and Bun), loaded on the first
 * `transact`, so the package still loads where it is absent; `get`/`set` work there without fences.
 */

import type { AsyncLocalStorage } from "node:async_hooks";
import { InvalidRequest, KeepstateError, LeaseLost, SessionLocked, Unavailable } from "./errors.js";
import type { Call, ConnectionOptions } from "./transport.js";
import { buildConfig, query, segment, Sender } from "./transport.js";
import { checkKey, encodeSized } from "./values.js";

/** The most one lease request waits at the server; a longer `waitMs` is several requests. */
const MAX_WAIT_MS = 30_000;

/** The options of a `SessionStore`: where, as whom, and its lease's timing. */
export interface SessionStoreOptions extends ConnectionOptions {
  /** The application's space of sessions (key charset), e.g. `"booking"`. */
  space: string;
  /** The lease's time to live in ms, renewed every third of it while an operation runs; default 15000. */
  leaseMs?: number;
  /** How long `transact` waits for a session another instance holds, in ms; default 30000. */
  waitMs?: number;
}

/** One held lease, as the holding operation (and its writes) see it. */
interface Lease {
  store: SessionStore<unknown>;
  id: string;
  fence: number;
  /** Why it was lost (`LeaseLost`, or `Unavailable` when renewals could not reach the server). */
  lost: KeepstateError | undefined;
  /** Rejects when the lease is lost. */
  loss: Promise<never>;
  lose(error: KeepstateError): void;
}

type Held = readonly Lease[];
let storage: AsyncLocalStorage<Held> | undefined;

async function leaseStorage(): Promise<AsyncLocalStorage<Held>> {
  if (storage === undefined) {
    const hooks = await import("node:async_hooks");
    storage ??= new hooks.AsyncLocalStorage<Held>();
  }
  return storage;
}

/**
 * A session store served by keepstate: `state` is any JSON object up to 1 MiB, stored as it is.
 * `S` is the runtime's state type (opaque here).
 */
export class SessionStore<S = any> {
  readonly space: string;
  readonly leaseMs: number;
  readonly waitMs: number;
  private readonly sender: Sender;

  constructor(baseUrl: string | undefined, options: SessionStoreOptions) {
    this.space = checkKey(options.space, "space");
    this.leaseMs = options.leaseMs ?? 15_000;
    this.waitMs = options.waitMs ?? 30_000;
    if (!Number.isSafeInteger(this.leaseMs) || this.leaseMs < 3 || this.leaseMs > 3_600_000) {
      throw new RangeError("leaseMs must be an integer from 3 to 3600000");
    }
    if (!(this.waitMs >= 0 && Number.isFinite(this.waitMs))) throw new RangeError("waitMs must be a number of ms >= 0");
    this.sender = new Sender(buildConfig(baseUrl, options));
  }

  /** The session's state, or null when absent (also after its expiry: the runtime judges that). */
  async get(id: string): Promise<S | null> {
    return await this.sender.send({
      method: "GET", path: this.path(id), parse: (answer) => answer.state, absent: () => null, safe: true,
    });
  }

  /**
   * Store `state` (a JSON object up to 1 MiB). Its `expiresAt` (ms since the epoch), when it has one,
   * is the session's expiry too: the server purges a session one day after it.
   */
  async set(id: string, state: S): Promise<void> {
    const text = encodeSized(state, "state");
    if (!text.startsWith("{")) throw new InvalidRequest("a session's state must be a JSON object");
    const expiresAt = (state as { expiresAt?: unknown }).expiresAt;
    const fields = [`"state":${text}`];
    if (Number.isSafeInteger(expiresAt) && (expiresAt as number) >= 0) fields.push(`"expires_at":${expiresAt}`);
    await this.fenced(id, (fence) => ({
      method: "PUT", path: this.path(id), parse: () => undefined, safe: fence !== undefined,
      body: `{${[...fields, ...(fence === undefined ? [] : [`"fence":${fence}`])].join(",")}}`,
    }));
  }

  /** Delete the session (absent is fine). */
  async delete(id: string): Promise<void> {
    await this.fenced(id, (fence) => ({
      method: "DELETE", path: this.path(id), params: query({ fence }), parse: () => undefined, safe: true,
    }));
  }

  /** Move the session's expiry to `expiresAt` (ms since the epoch); an absent session stays absent. */
  async touch(id: string, expiresAt: number): Promise<void> {
    if (!Number.isSafeInteger(expiresAt) || expiresAt < 0) throw new RangeError("expiresAt must be ms since the epoch");
    await this.fenced(id, (fence) => ({
      method: "POST", path: this.path(id, "/touch"), body: JSON.stringify({ expires_at: expiresAt, fence }),
      parse: () => undefined, safe: true,
    }));
  }

  /**
   * Run `operation` holding the session's lease, across every instance sharing the server's store.
   * Re-entrant: inside an operation on `id`, `transact(id, ...)` just runs. Rejects with
   * `SessionLocked` after `waitMs` of waiting, `LeaseLost` when the lease is lost meanwhile (its
   * later writes fail), `Unavailable` when the server cannot be reached.
   */
  async transact<T>(id: string, operation: () => Promise<T>): Promise<T> {
    checkKey(id, "session id");
    const als = await leaseStorage();
    const held = als.getStore() ?? [];
    if (held.some((lease) => lease.store === this && lease.id === id)) return operation();
    const lease = newLease(this, id, await this.acquire(id));
    const renewals = new Renewals(lease, this.leaseMs, (fence) => this.renew(id, fence));
    try {
      const running = als.run([...held, lease], operation);
      const result = await Promise.race([running, lease.loss]);
      if (lease.lost) throw lease.lost;
      return result;
    } finally {
      await renewals.stop();
      await this.release(id, lease.fence);
    }
  }

  private path(id: string, tail = ""): string {
    return `/v0/session-stores/${segment(this.space)}/sessions/${segment(checkKey(id, "session id"))}${tail}`;
  }

  /** A write, fenced by the lease of `id` this operation holds (if any); a refused fence loses the lease. */
  private async fenced(id: string, call: (fence: number | undefined) => Call<void>): Promise<void> {
    const lease = storage?.getStore()?.find((held) => held.store === this && held.id === id);
    if (lease?.lost) throw lease.lost;
    try {
      await this.sender.send(call(lease?.fence));
    } catch (error) {
      if (lease && error instanceof LeaseLost) lease.lose(error);
      throw error;
    }
  }

  private async acquire(id: string): Promise<number> {
    const giveUp = Date.now() + this.waitMs;
    for (;;) {
      const waitMs = Math.max(0, Math.min(MAX_WAIT_MS, Math.round(giveUp - Date.now())));
      try {
        return await this.sender.send({
          method: "POST", path: this.path(id, "/lease"), longPoll: waitMs / 1000, parse: (answer) => answer.fence as number,
          body: JSON.stringify({ ttl_ms: this.leaseMs, wait_ms: waitMs }),
        });
      } catch (error) {
        if (!(error instanceof SessionLocked) || Date.now() >= giveUp) throw error;
      }
    }
  }

  /** True when renewed; false when a newer lease exists. Other errors (Unavailable) are thrown. */
  private async renew(id: string, fence: number): Promise<boolean> {
    try {
      return await this.sender.send({
        method: "POST", path: this.path(id, "/lease/renew"), body: JSON.stringify({ fence, ttl_ms: this.leaseMs }),
        parse: () => true, safe: true,
      });
    } catch (error) {
      if (error instanceof LeaseLost) return false;
      throw error;
    }
  }

  /** Free the lease; an unreachable server leaves it to expire. */
  private async release(id: string, fence: number): Promise<void> {
    try {
      await this.sender.send({
        method: "POST", path: this.path(id, "/lease/release"), body: JSON.stringify({ fence }),
        parse: () => undefined, safe: true,
      });
    } catch (error) {
      if (!(error instanceof Unavailable)) throw error;
    }
  }
}

function newLease(store: SessionStore<unknown>, id: string, fence: number): Lease {
  let reject: (error: KeepstateError) => void = () => undefined;
  const loss = new Promise<never>((_, fail) => (reject = fail));
  loss.catch(() => undefined); // a loss nobody races any more is not an unhandled rejection
  const lease: Lease = {
    store, id, fence, lost: undefined, loss,
    lose(error) {
      if (lease.lost) return;
      lease.lost = error;
      reject(error);
    },
  };
  return lease;
}

/**
 * The renewal of one lease: every third of its life; sooner (every 250 ms at most) after a failure
 * to reach the server, until the lease would have run out, when it counts as lost (`Unavailable`).
 */
class Renewals {
  private timer: ReturnType<typeof setTimeout> | undefined;
  private inFlight: Promise<void> | undefined;
  private stopped = false;
  private deadline: number;

  constructor(
    private readonly lease: Lease,
    private readonly leaseMs: number,
    private readonly renew: (fence: number) => Promise<boolean>,
  ) {
    this.deadline = Date.now() + leaseMs;
    this.schedule(leaseMs / 3);
  }

  /** No more renewals; resolves once the one in flight (if any) has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inFlight;
  }

  private schedule(ms: number): void {
    this.timer = setTimeout(() => (this.inFlight = this.once()), ms);
  }

  private async once(): Promise<void> {
    const interval = this.leaseMs / 3;
    let renewed: boolean | undefined;
    try {
      renewed = await this.renew(this.lease.fence);
    } catch {
      renewed = undefined; // not reached: try again sooner, until the lease would have run out
    }
    if (this.stopped) return;
    const { id } = this.lease;
    if (renewed) {
      this.deadline = Date.now() + this.leaseMs;
      this.schedule(interval);
    } else if (renewed === false) {
      this.lease.lose(new LeaseLost(`session ${JSON.stringify(id)}: lease lost while the operation ran`));
    } else if (Date.now() >= this.deadline - Math.min(interval, 500)) {
      const why = `session ${JSON.stringify(id)}: the server was unreachable and the lease ran out`;
      this.lease.lose(new Unavailable(why, { retryAfter: 1 }));
    } else {
      this.schedule(Math.min(interval, 250));
    }
  }
}
