/** The request bodies both the REST calls and the stream send, and their JSON. */

import type { Instance, PredictCreate } from "./types.js";

export interface PredictOptions {
  /** Your id of the trial; a tracked prediction gets a client-made one when none is given. */
  trialId?: string;
  /** false: only predict, keep nothing, expect no label. Default true. */
  track?: boolean;
}

/** A fresh random id, for a trial or an idempotency key: the same for all its retries. */
export function newId(): string {
  return globalThis.crypto.randomUUID().replaceAll("-", "");
}

/** The body of one predict: a tracked one carries a trial id, so that a retry finds its
 * first answer (an untracked one stores nothing and needs none). */
export function predictItem(
  instance: Instance,
  { trialId, track = true }: PredictOptions = {},
): PredictCreate {
  const item: PredictCreate = { instance, track };
  const id = trialId ?? (track ? newId() : undefined);
  if (id !== undefined) item.trial_id = id;
  return item;
}

/**
 * JSON for the service. A NaN or an infinity is refused here: JSON has no such number,
 * and the `null` that `JSON.stringify` would send means "abstains" to the service.
 */
export function encode(body: unknown): string {
  return JSON.stringify(body, (key, value: unknown) => {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new RangeError(`${key || "a value"} is ${value}: numbers sent must be finite`);
    }
    return value;
  });
}
