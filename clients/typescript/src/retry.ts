/**
 * When a failed call is tried again, and after how long.
 *
 * A call is *idempotent* when sending it twice has the effect of sending it once: reads,
 * predictions with a trial id (the service returns the stored prediction for the same id
 * and instance), labels (the same label again returns the same answer), and the other
 * writes (`learn`, creating or deleting a model, importing a state), which the client
 * sends with an `Idempotency-Key` the service answers retries by. Those are retried after
 * a failed or timed-out connection and after a 503. A call marked not idempotent (making
 * or revoking an API key) is retried only when the request certainly did not reach the
 * service. Every call is retried after a 429, which the service answers before applying
 * anything, waiting its `Retry-After`.
 */

import { type CommitteeError, ConnectionFailed, RateLimited, Unavailable } from "./errors.js";

export interface RetryOptions {
  /** Tries per call, the first included (1: never retry). Default 3. */
  attempts?: number;
  /** Milliseconds before the first retry; each further one waits `multiplier` times longer. Default 100. */
  backoff?: number;
  /** Growth of the wait between retries. Default 2. */
  multiplier?: number;
  /** Longest wait in milliseconds, also the cap on a `Retry-After` the service sends. Default 10,000. */
  maxDelay?: number;
  /** Fraction of each wait drawn at random (0 to 1), so clients don't retry in step. Default 0.1. */
  jitter?: number;
}

/** How failed calls are retried: up to `attempts` tries in all, with exponential backoff. */
export class Retry {
  readonly attempts: number;
  readonly backoff: number;
  readonly multiplier: number;
  readonly maxDelay: number;
  readonly jitter: number;

  constructor({
    attempts = 3,
    backoff = 100,
    multiplier = 2,
    maxDelay = 10_000,
    jitter = 0.1,
  }: RetryOptions = {}) {
    check("attempts", attempts, Number.isInteger(attempts) && attempts >= 1, "an integer >= 1");
    check("backoff", backoff, backoff >= 0, ">= 0");
    check("multiplier", multiplier, multiplier >= 1, ">= 1");
    check("maxDelay", maxDelay, maxDelay >= 0, ">= 0");
    check("jitter", jitter, jitter >= 0 && jitter <= 1, "in [0, 1]");
    this.attempts = attempts;
    this.backoff = backoff;
    this.multiplier = multiplier;
    this.maxDelay = maxDelay;
    this.jitter = jitter;
  }

  /** Milliseconds to wait after failed try number `attempt` (1-based). */
  delay(attempt: number, retryAfter: number | null = null): number {
    let wait = this.backoff * this.multiplier ** (attempt - 1);
    wait *= 1 - this.jitter * Math.random();
    if (retryAfter !== null) wait = Math.max(wait, retryAfter);
    return Math.min(wait, this.maxDelay);
  }

  /** Milliseconds to wait before trying again after `error`, or null to give up. */
  after(error: CommitteeError, attempt: number, idempotent: boolean): number | null {
    if (attempt >= this.attempts) return null;
    let retry: boolean;
    if (error instanceof ConnectionFailed) {
      retry = idempotent || !error.sent;
    } else if (error instanceof RateLimited) {
      retry = true; // refused whole: nothing was applied
    } else {
      retry = idempotent && error instanceof Unavailable;
    }
    if (!retry) return null;
    return this.delay(attempt, error instanceof Unavailable ? error.retryAfter : null);
  }
}

function check(name: string, value: number, ok: boolean, expected: string): void {
  if (!ok || Number.isNaN(value)) throw new RangeError(`${name} must be ${expected}, got ${value}`);
}
