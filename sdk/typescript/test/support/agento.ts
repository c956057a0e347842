/**
 * The runtime side of seed 003, as far as a session store sees it: agento-runtime's `SessionStore`
 * interface exactly as its page gives it, and a small runtime that continues a booking: one call
 * leaves a pending selection, a later "yes" confirms it with one effectful call. The tests plug
 * keepstate's `SessionStore` into it in one line, as a user plugs it into the real runtime.
 */

/** What the runtime keeps per session (the fields this flow uses; the store treats it as opaque JSON). */
export interface SessionStateV2 {
  state: Record<string, unknown>;
  history: { role: "user" | "assistant"; content: string }[];
  pendingConfirmation: { item: string } | null;
  bookings: string[];
  configHash: string;
  expiresAt: number;
  messageCount: number;
}

/** agento-runtime's custom store interface, as seed 003 prints it. */
export interface SessionStore {
  get(id: string): Promise<SessionStateV2 | null>;
  set(id: string, state: SessionStateV2): Promise<void>;
  delete(id: string): Promise<void>;
  touch(id: string, expiresAt: number): Promise<void>;
  transact<T>(id: string, operation: () => Promise<T>): Promise<T>;
}

export function freshState(pending: { item: string } | null, ttlMs = 600_000): SessionStateV2 {
  return {
    state: {}, history: [], pendingConfirmation: pending, bookings: [], configHash: "cfg-1",
    expiresAt: Date.now() + ttlMs, messageCount: 0,
  };
}

/** A runtime instance: any number of them, in any number of processes, share sessions through the store. */
export class AgentRuntime {
  readonly sessionStore: SessionStore;

  constructor(options: { sessionStore: SessionStore }) {
    this.sessionStore = options.sessionStore;
  }

  /** The user's "yes": book the pending selection through `book` (the booking API) if it is still pending. */
  confirm(sessionId: string, book: (item: string) => Promise<string>): Promise<"booked" | "nothing"> {
    return this.sessionStore.transact(sessionId, async () => {
      const session = await this.sessionStore.get(sessionId);
      const pending = session?.pendingConfirmation;
      if (!session || !pending) return "nothing";
      session.bookings.push(await book(pending.item)); // awaited network work, inside the transaction
      session.pendingConfirmation = null;
      session.history.push({ role: "user", content: "yes" }, { role: "assistant", content: "Booked." });
      session.messageCount += 2;
      await this.sessionStore.set(sessionId, session);
      return "booked";
    });
  }
}
