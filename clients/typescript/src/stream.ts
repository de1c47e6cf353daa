/**
 * The WebSocket stream, `WS /v1/models/{name}/stream` (Node.js: the `ws` package, whose
 * handshake can carry the `Authorization` header a browser's WebSocket cannot).
 *
 * Each request is one JSON text message `{"op", "id", ...}` with the fields of the REST
 * call of that name; the service answers each, in order, with `{"id", "result"}` or
 * `{"id", "error": {"status", "message", "field"}}`. It refuses a stream by closing it
 * with 4000 + the HTTP status of the refusal: 4401 no valid API key (or it was revoked),
 * 4403 the key's scope does not allow the stream, 4404 no such model (or outside the
 * key's models), 4429 the key's request rate. The stream is not retried: a dropped
 * connection fails the requests in flight with a ConnectionFailed (`sent` true), since
 * they may have been applied.
 */

import WebSocket from "ws";

import { encode, predictItem, type PredictOptions } from "./bodies.js";
import { type CommitteeError, ConnectionFailed, fromItem, fromResponse } from "./errors.js";
import type {
  BatchItem,
  Instance,
  Label,
  LabelCreate,
  Labelled,
  LearnCreate,
  Learned,
  PredictCreate,
  Prediction,
} from "./types.js";

export const WINDOW = 256;
const REFUSED = 4000; // close code 4000 + s: refused as the HTTP status s would be
const RATE_RETRY_AFTER = "1"; // a close frame has no Retry-After; the service never asks less

/** The fields of each op's request (those of its REST call), and its answer. */
interface Requests {
  predict: PredictCreate;
  label: LabelCreate;
  learn: LearnCreate;
}
interface Results {
  predict: Prediction;
  label: Labelled;
  learn: Learned;
}
type Op = keyof Results;

interface Pending {
  resolve: (item: BatchItem<unknown>) => void;
  reject: (error: CommitteeError) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** The stream's `ws://` (or `wss://`) address for an `http(s)://` base URL. */
export function streamUrl(baseUrl: string, name: string): string {
  const url = new URL(`${baseUrl.replace(/\/+$/, "")}/v1/models/${encodeURIComponent(name)}/stream`);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.toString();
}

/** Why the stream ended, as the client's error. */
export function closedError(code: number, reason: string): CommitteeError {
  const status = code - REFUSED;
  if ([401, 403, 404, 429].includes(status)) {
    const detail = reason || `the service refused the stream (${code})`;
    return fromResponse(status, { detail }, status === 429 ? RATE_RETRY_AFTER : null);
  }
  return new ConnectionFailed(`the stream closed (${code}${reason ? `: ${reason}` : ""})`, true);
}

/** The answer's item as its result, or its error thrown. */
export function unwrap<T>(item: BatchItem<T>): T {
  if (item.error) throw fromItem(item.error);
  if (item.result === undefined || item.result === null) {
    throw new ConnectionFailed("an answer with neither result nor error", true);
  }
  return item.result;
}

/**
 * Predict, label and learn over one WebSocket; made by `Client.stream(name)`. Calls may be
 * made concurrently; each gets its own answer. A `*Many` call keeps up to `window`
 * requests in flight and returns one item per request, in order.
 */
export class Stream {
  private readonly waiting = new Map<number, Pending>();
  private nextId = 0;
  private ended: CommitteeError | null = null;
  private readonly closed: Promise<void>;

  private constructor(
    private readonly ws: WebSocket,
    readonly timeout: number,
    readonly window: number,
  ) {
    ws.on("message", (data) => this.receive(data.toString()));
    ws.on("error", () => {}); // a "close" follows each "error", and tells why
    this.closed = new Promise((resolve) => {
      ws.on("close", (code, reason) => {
        this.end(closedError(code, reason.toString()));
        resolve();
      });
    });
  }

  /** Open a stream to `url`: resolves once the handshake is done. */
  static open(
    url: string,
    headers: Record<string, string>,
    timeout: number,
    window: number,
  ): Promise<Stream> {
    if (!Number.isInteger(window) || window < 1) {
      throw new RangeError(`window must be an integer >= 1, got ${window}`);
    }
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, handshakeTimeout: timeout });
      const fail = (error: CommitteeError): void => {
        reject(error);
        ws.terminate();
      };
      ws.on("error", (e) => fail(new ConnectionFailed(`the stream did not open: ${e.message}`, false, e)));
      ws.once("unexpected-response", (_req, res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          let body: unknown;
          try {
            body = JSON.parse(text);
          } catch {
            body = { detail: text || res.statusMessage };
          }
          const retryAfter = res.headers["retry-after"];
          fail(fromResponse(res.statusCode ?? 0, body, typeof retryAfter === "string" ? retryAfter : null));
        });
      });
      ws.once("open", () => {
        ws.removeAllListeners();
        resolve(new Stream(ws, timeout, window));
      });
    });
  }

  /** Close the stream; requests still in flight fail with a ConnectionFailed. */
  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.close(1000);
    await this.closed;
  }

  private receive(text: string): void {
    let answer: { id?: unknown } & BatchItem<unknown>;
    try {
      answer = JSON.parse(text) as typeof answer;
    } catch {
      return; // not an answer of ours
    }
    const pending = typeof answer.id === "number" ? this.waiting.get(answer.id) : undefined;
    if (pending === undefined) return;
    this.waiting.delete(answer.id as number);
    clearTimeout(pending.timer);
    pending.resolve({ result: answer.result ?? null, error: answer.error ?? null });
  }

  private end(error: CommitteeError): void {
    this.ended ??= error;
    for (const pending of this.waiting.values()) {
      clearTimeout(pending.timer);
      pending.reject(this.ended);
    }
    this.waiting.clear();
  }

  /** Send one request: its answer's item (a result or an item error). */
  private request<O extends Op>(op: O, body: Requests[O]): Promise<BatchItem<Results[O]>> {
    if (this.ended !== null) return Promise.reject(this.ended);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        reject(new ConnectionFailed(`no answer within ${this.timeout} ms`, true));
        this.ws.terminate();
      }, this.timeout);
      this.waiting.set(id, { resolve: resolve as Pending["resolve"], reject, timer });
      // Sent on a connection that is closing (the service refused the stream, say), the
      // request is not written, and the "close" that follows fails it with the reason.
      this.ws.send(encode({ op, id, ...body }));
    });
  }

  private async many<O extends Op>(op: O, bodies: Requests[O][]): Promise<BatchItem<Results[O]>[]> {
    const answers: Promise<BatchItem<Results[O]>>[] = [];
    let inFlight = 0;
    let room: (() => void) | null = null;
    const done = (): void => {
      inFlight--;
      room?.();
      room = null;
    };
    for (const body of bodies) {
      while (inFlight >= this.window) await new Promise<void>((resolve) => (room = resolve));
      inFlight++;
      const answer = this.request(op, body);
      answer.then(done, done);
      answers.push(answer);
    }
    return Promise.all(answers);
  }

  /** As `Client.predict`: a tracked prediction gets a client-made trial id. */
  async predict(instance: Instance, options: PredictOptions = {}): Promise<Prediction> {
    return unwrap(await this.request("predict", predictItem(instance, options)));
  }

  /** As `Client.label`. */
  async label(trialId: string, label: Label): Promise<Labelled> {
    return unwrap(await this.request("label", { trial_id: trialId, label }));
  }

  /** As `Client.learn` (without an idempotency key: the stream is not retried). */
  async learn(instance: Instance, label: Label): Promise<Learned> {
    return unwrap(await this.request("learn", { instance, label }));
  }

  /** Tracked predictions, pipelined, each with a client-made trial id. */
  predictMany(instances: Instance[]): Promise<BatchItem<Prediction>[]> {
    return this.many(
      "predict",
      instances.map((x) => predictItem(x)),
    );
  }

  /** Labels given as [trialId, label], pipelined. */
  labelMany(labels: [string, Label][]): Promise<BatchItem<Labelled>[]> {
    return this.many(
      "label",
      labels.map(([trialId, label]) => ({ trial_id: trialId, label })),
    );
  }

  /** [instance, label] trials learned in order, up to `window` in flight. */
  learnMany(trials: [Instance, Label][]): Promise<BatchItem<Learned>[]> {
    return this.many(
      "learn",
      trials.map(([instance, label]) => ({ instance, label })),
    );
  }
}
