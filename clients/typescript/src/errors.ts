/**
 * What the client throws: one class per kind of failure, all {@link CommitteeError}.
 *
 * The service answers an error with a JSON body `{"detail": ...}`: a message, or for a
 * 422 a list of `{"loc", "msg", "type"}` entries naming the field. {@link fromResponse}
 * turns such an answer into the matching error; {@link fromItem} does the same for one
 * failed item of a batch or a stream.
 */

import type { ItemError } from "./types.js";

/** Base class of every client error. */
export class CommitteeError extends Error {
  /** The HTTP status the service answered, or null when no answer came. */
  readonly status: number | null;
  /** The `detail` of the answer as sent (a message, or a list of field errors). */
  readonly detail: unknown;
  /** The whole decoded body of the answer (null when none came). */
  readonly body: unknown;

  constructor(status: number | null, detail: unknown, body: unknown = null, message?: string) {
    const text = message ?? describe(detail);
    super(status === null ? text : `${status}: ${text}`);
    this.name = new.target.name;
    this.status = status;
    this.detail = detail;
    this.body = body;
  }
}

/** 401: auth is on and no valid API key came (none, unknown or revoked). */
export class Unauthorized extends CommitteeError {}

/** 403: the key is valid but its scope does not allow this call (a read key that learns). */
export class Forbidden extends CommitteeError {}

/** 404: no such model, or no pending trial with this id (unknown or expired). */
export class NotFound extends CommitteeError {}

/** 409: the model name is taken, or the trial is labelled differently or its id is taken. */
export class Conflict extends CommitteeError {}

/** 413: the request body is over the service's limit; send smaller batches. */
export class TooLarge extends CommitteeError {}

/** 500 or another 5xx but 502, 503 and 504: a fault of the service. */
export class ServerError extends CommitteeError {}

/** One field error of a 422: where (`instance.features`, null when unnamed) and what. */
export interface FieldError {
  field: string | null;
  message: string;
}

/** 422: the request is wrong for this model; `field` names where (`instance.features`). */
export class InvalidInput extends CommitteeError {
  /** Every field error; `field` is the first one's. */
  readonly errors: FieldError[];
  readonly field: string | null;

  constructor(status: number, detail: unknown, body: unknown, errors: FieldError[]) {
    const all = errors.length > 0 ? errors : [{ field: null, message: describe(detail) }];
    super(
      status,
      detail,
      body,
      all.map((e) => (e.field ? `${e.field}: ${e.message}` : e.message)).join("; "),
    );
    this.errors = all;
    this.field = all[0]?.field ?? null;
  }
}

/** 503 (or 502, 504): the service cannot answer now; `retryAfter` in milliseconds if sent. */
export class Unavailable extends CommitteeError {
  readonly retryAfter: number | null;

  constructor(
    status: number | null,
    detail: unknown,
    body: unknown = null,
    retryAfter: number | null = null,
  ) {
    super(status, detail, body);
    this.retryAfter = retryAfter;
  }
}

/**
 * No answer came: the connection failed or timed out (`status` is null). `sent` is false
 * when the request certainly did not reach the service (the connection could not be
 * made), true when it may have (a timeout, a dropped connection): a `learn` may then have
 * been applied.
 */
export class ConnectionFailed extends Unavailable {
  readonly sent: boolean;

  constructor(detail: string, sent: boolean, cause?: unknown) {
    super(null, detail);
    this.sent = sent;
    if (cause !== undefined) this.cause = cause;
  }
}

/**
 * 429: a rate limit or quota was reached; `limit` names it (`requests_per_second`,
 * `max_models`...) and `max` is its value. Nothing of the request was applied, so every
 * call is retried after `retryAfter`, as after a 503.
 */
export class RateLimited extends Unavailable {
  readonly limit: string | null;
  readonly max: number | null;

  constructor(status: number, detail: unknown, body: unknown, retryAfter: number | null) {
    super(status, detail, body, retryAfter);
    const fields = isRecord(body) ? body : {};
    this.limit = typeof fields["limit"] === "string" ? fields["limit"] : null;
    this.max = typeof fields["max"] === "number" ? fields["max"] : null;
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function describe(detail: unknown): string {
  return typeof detail === "string" ? detail : JSON.stringify(detail);
}

/** `["body", "instance", "features"]` as `instance.features`. */
function fieldOf(loc: unknown): string | null {
  const parts = Array.isArray(loc) ? loc.map(String) : [];
  if (parts[0] === "body") parts.shift();
  return parts.length > 0 ? parts.join(".") : null;
}

function fieldErrors(detail: unknown): FieldError[] {
  if (!Array.isArray(detail)) return [{ field: null, message: describe(detail) }];
  return detail.map((d: unknown) =>
    isRecord(d)
      ? { field: fieldOf(d["loc"]), message: String(d["msg"] ?? describe(d)) }
      : { field: null, message: describe(d) },
  );
}

/** A `Retry-After` header in milliseconds; null when absent or an HTTP date. */
export function retryAfterMs(value: string | null | undefined): number | null {
  if (value === null || value === undefined || value.trim() === "") return null;
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : null;
}

/** The error for an error answer with `status` and decoded JSON `body`. */
export function fromResponse(
  status: number,
  body: unknown,
  retryAfter: string | null = null,
): CommitteeError {
  const detail = isRecord(body) && "detail" in body ? body["detail"] : body;
  switch (status) {
    case 401:
      return new Unauthorized(status, detail, body);
    case 403:
      return new Forbidden(status, detail, body);
    case 404:
      return new NotFound(status, detail, body);
    case 409:
      return new Conflict(status, detail, body);
    case 413:
      return new TooLarge(status, detail, body);
    case 422:
      return new InvalidInput(status, detail, body, fieldErrors(detail));
    case 429:
      return new RateLimited(status, detail, body, retryAfterMs(retryAfter));
    case 502:
    case 503:
    case 504:
      return new Unavailable(status, detail, body, retryAfterMs(retryAfter));
    default:
      return status >= 500 ? new ServerError(status, detail, body) : new CommitteeError(status, detail, body);
  }
}

/** The error for one failed item of a batch or a stream, `{"status", "message", "field"}`. */
export function fromItem(error: ItemError): CommitteeError {
  if (error.status === 422) {
    return new InvalidInput(422, error.message, error, [
      { field: error.field ?? null, message: error.message },
    ]);
  }
  return fromResponse(error.status, { detail: error.message });
}
