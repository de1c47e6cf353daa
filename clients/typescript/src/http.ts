/**
 * One request to the service and the reading of its answer: the JSON encoding, the
 * mapping of failures to the client's errors, and the retries.
 */

import { encode } from "./bodies.js";
import { CommitteeError, ConnectionFailed, fromResponse } from "./errors.js";
import type { Retry } from "./retry.js";
import type { Answer, Method, Path, PathParams, QueryParams, RequestBody } from "./types.js";

/**
 * One call: the route, its parameters and body. `idempotent` allows retrying it after any
 * failure, `retried` false never retries it (a probe answers at once), and `key` is sent
 * as the `Idempotency-Key` header: the service answers every retry of a write with its
 * first answer.
 */
export interface Call<P extends Path, M extends Method> {
  method: M;
  path: P;
  params?: PathParams<P, M>;
  query?: QueryParams<P, M>;
  body?: RequestBody<P, M>;
  idempotent?: boolean;
  retried?: boolean;
  key?: string;
}

/** What a retry hook is told before the client waits and tries again. */
export interface RetryEvent {
  method: string;
  path: string;
  error: CommitteeError;
  attempt: number;
  wait: number;
}

export interface Transport {
  baseUrl: string;
  headers: Record<string, string>;
  timeout: number;
  retry: Retry;
  fetch: typeof fetch;
  onRetry?: ((event: RetryEvent) => void) | undefined;
}

// error codes of a connection that could not be made: the request was never written
const UNSENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** `/v1/models/{name}` with `name` filled in (percent-encoded), and the query after it. */
export function route(path: string, params?: unknown, query?: unknown): string {
  const values = (params ?? {}) as Record<string, unknown>;
  const filled = path.replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(values[k])));
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries((query ?? {}) as Record<string, unknown>)) {
    if (v !== undefined && v !== null) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `${filled}?${s}` : filled;
}

function connectionFailed(e: unknown, timeout: number): ConnectionFailed {
  if (e instanceof Error && e.name === "TimeoutError") {
    return new ConnectionFailed(`no answer within ${timeout} ms`, true, e);
  }
  const cause = e instanceof Error ? e.cause : undefined;
  const code = (cause as { code?: unknown } | undefined)?.code;
  const what = [typeof code === "string" ? code : null, cause instanceof Error ? cause.message : String(e)];
  return new ConnectionFailed(
    what.filter(Boolean).join(": "),
    !(typeof code === "string" && UNSENT.has(code)),
    e,
  );
}

function errorOf(
  status: number,
  text: string,
  statusText: string,
  retryAfter: string | null,
): CommitteeError {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = { detail: text || statusText };
  }
  return fromResponse(status, body, retryAfter);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

interface Success {
  status: number;
  text: string;
}

/** One try: the success answer's text, or the error of a failure. */
async function once(
  t: Transport,
  method: string,
  url: string,
  headers: Record<string, string>,
  payload?: string,
): Promise<Success | CommitteeError> {
  let r: Response;
  let text: string;
  try {
    r = await t.fetch(url, {
      method,
      headers,
      ...(payload === undefined ? {} : { body: payload }),
      signal: AbortSignal.timeout(t.timeout),
    });
    text = await r.text();
  } catch (e) {
    return connectionFailed(e, t.timeout);
  }
  if (!r.ok) return errorOf(r.status, text, r.statusText, r.headers.get("retry-after"));
  return { status: r.status, text };
}

function decode({ status, text }: Success): unknown {
  if (text === "") return undefined; // 204
  try {
    return JSON.parse(text);
  } catch {
    throw new CommitteeError(status, `the answer is not JSON: ${text.slice(0, 200)}`);
  }
}

/** Send `call`, retrying as `t.retry` allows: the decoded answer, or a CommitteeError thrown. */
export async function send<P extends Path, M extends Method>(
  t: Transport,
  call: Call<P, M>,
): Promise<Answer<P, M>> {
  const method = call.method.toUpperCase();
  const path = route(call.path, call.params, call.query);
  const headers: Record<string, string> = { ...t.headers };
  const payload = call.body === undefined ? undefined : encode(call.body);
  if (payload !== undefined) headers["content-type"] = "application/json";
  if (call.key !== undefined) headers["idempotency-key"] = call.key;
  for (let attempt = 1; ; attempt++) {
    const outcome = await once(t, method, t.baseUrl + path, headers, payload);
    if (!(outcome instanceof CommitteeError)) return decode(outcome) as Answer<P, M>;
    const wait = call.retried === false ? null : t.retry.after(outcome, attempt, call.idempotent ?? true);
    if (wait === null) throw outcome;
    t.onRetry?.({ method, path, error: outcome, attempt, wait });
    await sleep(wait);
  }
}
