/** A live model's admin calls against the running service: experts added, a backtest, a
 * rollback, and a shadow challenger attached, read, promoted and retired. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, type ModelCreate, NotFound } from "../src/index.js";
import { FAST, modelName, OPEN_URL } from "./helpers.js";

function fusion(name: string): ModelCreate {
  return {
    name,
    labels: ["cat", "dog"],
    input: { experts: { expert_names: ["a", "b"] } },
    learner: { kind: "committee" },
  };
}

test("a challenger follows the model's trials and is promoted as its learner", async () => {
  const c = new Client(OPEN_URL, { retry: FAST });
  const name = modelName("challenger");
  await c.createModel(fusion(name));
  const attached = await c.attachChallenger(name, "wm", { kind: "weighted-majority" });
  assert.deepEqual(attached.challengers.map((ch) => ch.name), ["wm"]);
  for (const y of ["cat", "dog", "dog", "cat"]) {
    await c.learn(name, { experts: { a: y, b: "cat" } }, y);
  }
  const read = await c.challengers(name);
  const wm = read.challengers[0];
  assert.equal(wm?.trials, 4);
  assert.equal(wm?.curve.at(-1)?.[0], 4);
  const promoted = await c.promoteChallenger(name, "wm");
  assert.deepEqual(promoted.learner, { kind: "weighted-majority" });
  assert.deepEqual((await c.model(name)).learner, { kind: "weighted-majority" });
  await c.attachChallenger(name, "mw", { kind: "multiclass-winnow" });
  await c.retireChallenger(name, "mw");
  assert.deepEqual((await c.challengers(name)).challengers, []);
  await assert.rejects(c.retireChallenger(name, "mw"), NotFound);
});

test("experts are added live, the log is backtested and the model rolled back", async () => {
  const c = new Client(OPEN_URL, { retry: FAST });
  const name = modelName("live");
  await c.createModel(fusion(name));
  await c.learn(name, { experts: { a: "dog", b: "cat" } }, "dog");
  const grown = await c.changeExperts(name, { add: ["c"] });
  assert.equal(grown.version, 2);
  await c.learn(name, { experts: { a: "cat", c: "cat" } }, "cat");
  const job = await c.backtest(name, { learner: { kind: "weighted-majority" }, wait: 30 });
  assert.equal(job.status, "done");
  assert.equal((await c.job(job.id)).id, job.id);
  const versions = await c.versions(name);
  assert.equal(versions.version, 3);
  const back = await c.rollback(name, 1);
  assert.equal(back.version, 4);
});
