/** {@link Client}: every call of the service's REST API, as an async method. */

import { newId, predictItem, type PredictOptions } from "./bodies.js";
import { CommitteeError } from "./errors.js";
import { type Call, type RetryEvent, send, type Transport } from "./http.js";
import { Retry, type RetryOptions } from "./retry.js";
import { Stream, streamUrl, WINDOW } from "./stream.js";
import type {
  Answer,
  ApiKey,
  AuditEntry,
  BacktestCreate,
  BatchItem,
  Challengers,
  Instance,
  Job,
  KeyLimits,
  Label,
  LabelCreate,
  Labelled,
  LearnCreate,
  Learned,
  LearnerKind,
  Method,
  Model,
  ModelCreate,
  ModelFork,
  NewKey,
  Path,
  Prediction,
  Scope,
  State,
  Stats,
} from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:8000";
export const API_KEY_VARIABLE = "COMMITTEE_API_KEY";

export interface ClientOptions {
  /** Milliseconds to wait for each answer (and for a stream to open). Default 10,000. */
  timeout?: number;
  /**
   * The API key sent with every request and stream (`Authorization: Bearer`); by default
   * the `COMMITTEE_API_KEY` environment variable. An empty key is none.
   */
  apiKey?: string;
  /** Headers sent with every request (for a proxy in front, say). */
  headers?: Record<string, string>;
  /** A retry policy, or a number of attempts (1: never retry). */
  retry?: Retry | RetryOptions | number;
  /** Called before each retry, with the call, its error and the wait. */
  onRetry?: (event: RetryEvent) => void;
  /** The `fetch` to use (the global one by default). */
  fetch?: typeof fetch;
}

/** Options of the writes sent with an `Idempotency-Key`. */
export interface WriteOptions {
  /** The key to send (a fresh random one by default): a write sent again with the same
   * key and body gets the first answer and is applied once. */
  idempotencyKey?: string;
}

/** `headers` with `Authorization: Bearer <key>` unless the key is empty or they have one. */
export function headersWithKey(
  headers: Record<string, string>,
  apiKey: string | undefined,
): Record<string, string> {
  const env = typeof process === "undefined" ? undefined : process.env[API_KEY_VARIABLE];
  const key = (apiKey ?? env ?? "").trim();
  const out = { ...headers };
  if (key && !Object.keys(out).some((k) => k.toLowerCase() === "authorization")) {
    out["Authorization"] = `Bearer ${key}`;
  }
  return out;
}

/**
 * A client of the Committee service. Every method returns the answer's body, typed from
 * the service's OpenAPI document, and throws a {@link CommitteeError} subclass on failure.
 *
 * Every call is retried after a failed connection, a timeout or a 503: reads are harmless
 * to repeat, a predict carries its trial id and a label is applied once, and the other
 * writes carry an `Idempotency-Key`, so the service answers a retry with its first answer.
 * Making and revoking API keys are retried only when the request cannot have arrived. A
 * 429 is retried by every call, after its `Retry-After`.
 */
export class Client {
  readonly baseUrl: string;
  readonly timeout: number;
  readonly retry: Retry;
  private readonly transport: Transport;

  constructor(baseUrl: string = DEFAULT_URL, options: ClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.timeout = options.timeout ?? 10_000;
    const r = options.retry ?? {};
    this.retry = r instanceof Retry ? r : new Retry(typeof r === "number" ? { attempts: r } : r);
    this.transport = {
      baseUrl: this.baseUrl,
      headers: headersWithKey(options.headers ?? {}, options.apiKey),
      timeout: this.timeout,
      retry: this.retry,
      fetch: options.fetch ?? globalThis.fetch,
      onRetry: options.onRetry,
    };
  }

  private run<P extends Path, M extends Method>(call: Call<P, M>): Promise<Answer<P, M>> {
    return send(this.transport, call);
  }

  // -- service --------------------------------------------------------------------------

  /** Whether the service process answers (`GET /healthz`); no retries, never throws. */
  async alive(): Promise<boolean> {
    return this.probe({ method: "get", path: "/healthz", retried: false });
  }

  /** Whether the service and its Redis answer (`GET /readyz`); no retries, never throws. */
  async ready(): Promise<boolean> {
    return this.probe({ method: "get", path: "/readyz", retried: false });
  }

  private async probe<P extends Path>(call: Call<P, "get">): Promise<boolean> {
    try {
      await this.run(call);
      return true;
    } catch (e) {
      if (e instanceof CommitteeError) return false;
      throw e;
    }
  }

  /** Every learner kind with its parameters, defaults and allowed values. */
  learners(): Promise<LearnerKind[]> {
    return this.run({ method: "get", path: "/v1/learners" });
  }

  // -- models ---------------------------------------------------------------------------

  /** Create a model: its labels, its input and its learner. Conflict if the name is taken. */
  createModel(body: ModelCreate, options: WriteOptions = {}): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    return this.run({ method: "post", path: "/v1/models", body, key });
  }

  /** Make a model from another at a version: its state, or another learner trained on
   * its log up to there. */
  forkModel(body: ModelFork, options: WriteOptions = {}): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    return this.run({ method: "post", path: "/v1/models", body, key });
  }

  async models(): Promise<Model[]> {
    return (await this.run({ method: "get", path: "/v1/models" })).models;
  }

  model(name: string): Promise<Model> {
    return this.run({ method: "get", path: "/v1/models/{name}", params: { name } });
  }

  async deleteModel(name: string, options: WriteOptions = {}): Promise<void> {
    const key = options.idempotencyKey ?? newId();
    await this.run({ method: "delete", path: "/v1/models/{name}", params: { name }, key });
  }

  /** The learner's full state and the log version it is at. */
  state(name: string): Promise<State> {
    return this.run({ method: "get", path: "/v1/models/{name}/state", params: { name } });
  }

  /** Replace the learner's state with `state`: the `state` of one exported ({@link state})
   * from a model of the same spec. */
  putState(name: string, state: State["state"], options: WriteOptions = {}): Promise<State> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/state";
    return this.run({ method: "put", path, params: { name }, body: { state }, key });
  }

  /** What the dashboard shows: counters, error rates, the confusion matrix, the curve. */
  stats(name: string): Promise<Stats> {
    return this.run({ method: "get", path: "/v1/models/{name}/stats", params: { name } });
  }

  // -- a live model: its input, rollbacks, backtests, challengers ------------------------

  /** Add experts and retire experts, live (one entry in the model's log). */
  changeExperts(
    name: string,
    change: { add?: string[]; retire?: string[] },
    options: WriteOptions = {},
  ): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/experts";
    return this.run({ method: "post", path, params: { name }, body: change, key });
  }

  /** Add named features, live (a model made with `feature_names`). */
  addFeatures(name: string, add: string[], options: WriteOptions = {}): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/features";
    return this.run({ method: "post", path, params: { name }, body: { add }, key });
  }

  /** Add labels, live (a multi-class learner gains a class). */
  addLabels(name: string, add: Label[], options: WriteOptions = {}): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/labels";
    return this.run({ method: "post", path, params: { name }, body: { add }, key });
  }

  /** Reset the learner to its state at `version` (an entry in the log: reversible). */
  rollback(name: string, version: number, options: WriteOptions = {}): Promise<Model> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/rollback";
    return this.run({ method: "post", path, params: { name }, body: { version }, key });
  }

  /** The versions the model can be rebuilt at, and its latest changes. */
  versions(name: string): Promise<Answer<"/v1/models/{name}/versions", "get">> {
    return this.run({ method: "get", path: "/v1/models/{name}/versions", params: { name } });
  }

  /** Replay the model's log through candidate learners beside it: the job, done or
   * running (follow it with {@link job}). */
  backtest(name: string, body: BacktestCreate, options: WriteOptions = {}): Promise<Job> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/backtest";
    return this.run({ method: "post", path, params: { name }, body, key });
  }

  /** A job (a backtest) as it is now. */
  job(jobId: string): Promise<Job> {
    return this.run({ method: "get", path: "/v1/jobs/{job_id}", params: { job_id: jobId } });
  }

  /** Attach `learner` as shadow challenger `challenger`: it follows every trial the model
   * learns, judged on the same labels, never answering. */
  attachChallenger(
    name: string,
    challenger: string,
    learner: Record<string, unknown>,
    options: WriteOptions = {},
  ): Promise<Challengers> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/challengers";
    const body = { name: challenger, learner };
    return this.run({ method: "post", path, params: { name }, body, key });
  }

  /** The model's challengers' figures beside its learner's on the same trials. */
  challengers(name: string): Promise<Challengers> {
    return this.run({ method: "get", path: "/v1/models/{name}/challengers", params: { name } });
  }

  /** Make the challenger, as it is now, the model's learner (one entry in the log). */
  promoteChallenger(name: string, challenger: string, options: WriteOptions = {}): Promise<Challengers> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/challengers/{challenger}/promote";
    return this.run({ method: "post", path, params: { name, challenger }, key });
  }

  /** Retire the challenger: it follows the model no more. */
  async retireChallenger(name: string, challenger: string, options: WriteOptions = {}): Promise<void> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/challengers/{challenger}";
    await this.run({ method: "delete", path, params: { name, challenger }, key });
  }

  // -- trials ---------------------------------------------------------------------------

  /** Predict a label. A tracked prediction waits for its label under its trial id. */
  predict(name: string, instance: Instance, options: PredictOptions = {}): Promise<Prediction> {
    const path = "/v1/models/{name}/predict";
    return this.run({ method: "post", path, params: { name }, body: predictItem(instance, options) });
  }

  /** Give a predicted trial its true label: applied once; the same label again gets the
   * same answer, a different one is a Conflict. */
  label(name: string, trialId: string, label: Label): Promise<Labelled> {
    const path = "/v1/models/{name}/label";
    return this.run({ method: "post", path, params: { name }, body: { trial_id: trialId, label } });
  }

  /** Predict, judge and learn a trial whose label is known; sent with an
   * `Idempotency-Key`, so a retry is learned once and gets the first answer. */
  learn(name: string, instance: Instance, label: Label, options: WriteOptions = {}): Promise<Learned> {
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/learn";
    return this.run({ method: "post", path, params: { name }, body: { instance, label }, key });
  }

  /** Predict several instances with one hypothesis; one item per instance, in order.
   * `trialIds`, when given, has one id (or undefined) per instance. */
  async predictBatch(
    name: string,
    instances: Instance[],
    options: { trialIds?: (string | undefined)[]; track?: boolean } = {},
  ): Promise<BatchItem<Prediction>[]> {
    const ids = options.trialIds ?? instances.map(() => undefined);
    if (ids.length !== instances.length) {
      throw new RangeError(`${ids.length} trial ids for ${instances.length} instances: expected one each`);
    }
    const items = instances.map((instance, i) => {
      const trialId = ids[i];
      return predictItem(instance, {
        ...(trialId === undefined ? {} : { trialId }),
        ...(options.track === undefined ? {} : { track: options.track }),
      });
    });
    const path = "/v1/models/{name}/predict/batch";
    return (await this.run({ method: "post", path, params: { name }, body: { items } })).items;
  }

  /** Label several trials, given as [trialId, label], in order. */
  async labelBatch(name: string, labels: [string, Label][]): Promise<BatchItem<Labelled>[]> {
    const items = labels.map(([trialId, label]): LabelCreate => ({ trial_id: trialId, label }));
    const path = "/v1/models/{name}/label/batch";
    return (await this.run({ method: "post", path, params: { name }, body: { items } })).items;
  }

  /** Learn several [instance, label] in order; retried like `learn`. */
  async learnBatch(
    name: string,
    trials: [Instance, Label][],
    options: WriteOptions = {},
  ): Promise<BatchItem<Learned>[]> {
    const items = trials.map(([instance, label]): LearnCreate => ({ instance, label }));
    const key = options.idempotencyKey ?? newId();
    const path = "/v1/models/{name}/learn/batch";
    return (await this.run({ method: "post", path, params: { name }, body: { items }, key })).items;
  }

  // -- API keys and the audit log (an admin key on every model) --------------------------

  /** Make an API key of `scope` for the models matching `models` (a glob); its secret is
   * `.key`, shown this once. Sent twice it would make two keys: retried only when it
   * cannot have arrived. */
  createKey(
    scope: Scope,
    { models = "*", name = "", limits }: { models?: string; name?: string; limits?: KeyLimits } = {},
  ): Promise<NewKey> {
    return this.run({
      method: "post",
      path: "/v1/keys",
      body: { scope, models, name, ...(limits ? { limits } : {}) },
      idempotent: false,
    });
  }

  /** Every API key, without its secret. */
  async apiKeys(): Promise<ApiKey[]> {
    return (await this.run({ method: "get", path: "/v1/keys" })).keys;
  }

  /** Revoke a key: the service refuses it within a second. Not retried blindly: a second
   * DELETE would answer 404 after the first succeeded. */
  async revokeKey(keyId: string): Promise<void> {
    const path = "/v1/keys/{key_id}";
    await this.run({ method: "delete", path, params: { key_id: keyId }, idempotent: false });
  }

  /** The newest `limit` entries of the audit log, newest first. */
  async audit(limit = 100): Promise<AuditEntry[]> {
    return (await this.run({ method: "get", path: "/v1/audit", query: { limit } })).entries;
  }

  // -- stream ---------------------------------------------------------------------------

  /** A WebSocket stream to model `name`, open; close it with `close()`. `window` bounds the
   * requests a `*Many` call keeps in flight. The stream is not retried. */
  stream(name: string, options: { window?: number } = {}): Promise<Stream> {
    const url = streamUrl(this.baseUrl, name);
    return Stream.open(url, this.transport.headers, this.timeout, options.window ?? WINDOW);
  }
}
