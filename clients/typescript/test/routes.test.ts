/** The types that tie each route to its bodies resolve to the schema's (checked when tsc
 * compiles this file), and routes are filled in as the service expects. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { route } from "../src/http.js";
import type {
  Answer,
  ApiKey,
  Model,
  PathParams,
  Prediction,
  QueryParams,
  RequestBody,
} from "../src/index.js";
import type { components } from "../src/schema.js";

type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type Schemas = components["schemas"];

// each line fails to compile when its route's types no longer resolve to the schema's
export const resolved: true[] = [
  true satisfies Equal<Answer<"/v1/models/{name}/predict", "post">, Prediction>,
  true satisfies Equal<
    RequestBody<"/v1/models/{name}/predict", "post">,
    Schemas["PredictCreate"] | Schemas["PredictInputsCreate"]
  >,
  true satisfies Equal<RequestBody<"/v1/models/{name}/learn", "post">, Schemas["LearnCreate"]>,
  true satisfies Equal<Answer<"/v1/models", "post">, Model>,
  true satisfies Equal<Answer<"/v1/keys", "get">, { keys: ApiKey[] }>,
  true satisfies Equal<Answer<"/v1/models/{name}", "delete">, undefined>,
  true satisfies Equal<PathParams<"/v1/models/{name}", "get">, { name: string }>,
  true satisfies Equal<PathParams<"/v1/keys", "get">, never>,
  true satisfies Equal<QueryParams<"/v1/audit", "get">, { limit?: number; before?: string | null }>,
  true satisfies Equal<RequestBody<"/v1/models/{name}", "get">, never>,
];

test("a route's parameters are filled in percent-encoded, its query after it", () => {
  assert.equal(route("/v1/models/{name}/stats", { name: "a b/c" }), "/v1/models/a%20b%2Fc/stats");
  assert.equal(route("/v1/audit", undefined, { limit: 5, before: null }), "/v1/audit?limit=5");
  assert.equal(route("/v1/models"), "/v1/models");
});
