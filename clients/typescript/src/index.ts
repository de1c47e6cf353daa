/**
 * A client of the Committee service: `Client` for the REST API, `Stream` for the
 * WebSocket, one error class per kind of failure, and the API's bodies typed from the
 * service's OpenAPI document.
 */

export { type ClientOptions, Client, DEFAULT_URL, API_KEY_VARIABLE, type WriteOptions } from "./client.js";
export type { PredictOptions } from "./bodies.js";
export * from "./errors.js";
export type { RetryEvent } from "./http.js";
export { Retry, type RetryOptions } from "./retry.js";
export { Stream, unwrap } from "./stream.js";
export type * from "./types.js";
export type { components, paths } from "./schema.js";
