/**
 * The API's bodies under short names, all taken from the generated `schema.ts`, and the
 * types that tie each route to its request and answer bodies.
 */

import type { components, paths } from "./schema.js";

type Schemas = components["schemas"];

/** A label: a string or an integer, as the model's labels were given. */
export type Label = Schemas["LabelCreate"]["label"];
/** `{"features": [...] | {feature: value}, "experts": {expert: vote}}`, either or both. */
export type Instance = Schemas["Instance"];
export type Prediction = Schemas["PredictPublic"];
export type Labelled = Schemas["LabelPublic"];
export type Learned = Schemas["LearnPublic"];
export type Model = Schemas["ModelPublic"];
export type ModelCreate = Schemas["ModelCreate"];
export type ModelFork = Schemas["ModelFork"];
export type LearnerSpec = Schemas["LearnerSpec"];
export type LearnerKind = Schemas["LearnerKind"];
export type Stats = Schemas["StatsPublic"];
export type State = Schemas["StatePublic"];
export type ApiKey = Schemas["KeyPublic"];
export type NewKey = Schemas["KeyCreated"];
export type KeyCreate = Schemas["KeyCreate"];
export type KeyLimits = Schemas["KeyLimits"];
export type Scope = KeyCreate["scope"];
export type AuditEntry = Schemas["AuditEntryPublic"];
export type ItemError = Schemas["ItemError"];
export type PredictCreate = Schemas["PredictCreate"];
export type LabelCreate = Schemas["LabelCreate"];
export type LearnCreate = Schemas["LearnCreate"];
export type Challengers = Schemas["ChallengersPublic"];
export type Challenger = Schemas["ChallengerPublic"];
export type Job = Schemas["JobPublic"];
export type BacktestCreate = Schemas["BacktestCreate"];

/** One item of a batch answer: its `result`, or its `error` when it failed alone. */
export interface BatchItem<T> {
  result?: T | null;
  error?: ItemError | null;
}

// -- routes ---------------------------------------------------------------------------

export type Path = keyof paths;
export type Method = "get" | "put" | "post" | "delete";

/** The operation of `M` on `P` (never when the route has no such method). */
type Operation<P extends Path, M extends Method> = Exclude<paths[P][M], undefined | never>;

type Json<R> = R extends { content: { "application/json": infer T } } ? T : never;

/** The JSON body an operation takes (never when it takes none). */
export type RequestBody<P extends Path, M extends Method> =
  Operation<P, M> extends { requestBody: infer B } ? Json<Exclude<B, undefined>> : never;

/** The path parameters an operation takes (never when it takes none). */
export type PathParams<P extends Path, M extends Method> =
  Operation<P, M> extends { parameters: { path: infer T } } ? T : never;

/** The query parameters an operation takes (never when it takes none). */
export type QueryParams<P extends Path, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer T } } ? T : never;

/** The body of an operation's success answer (undefined for a 204). */
export type Answer<P extends Path, M extends Method> =
  Operation<P, M> extends { responses: infer R }
    ? R extends { 200: infer A }
      ? Json<A>
      : R extends { 201: infer A }
        ? Json<A>
        : R extends { 204: unknown }
          ? undefined
          : never
    : never;
