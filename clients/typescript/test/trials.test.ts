/** Predict, label and learn, one at a time and in batches, and the errors they answer. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Conflict, InvalidInput, NotFound } from "../src/index.js";
import { FAST, modelName, OPEN_URL, perceptron, X } from "./helpers.js";

const client = new Client(OPEN_URL, { retry: FAST });

test("a prediction, then its label: the judged answer", async () => {
  const name = modelName("judged");
  await client.createModel(perceptron(name));

  const p = await client.predict(name, X);
  assert.equal(p.label, "cat");
  assert.deepEqual(Object.keys(p.scores).sort(), ["cat", "dog"]);
  assert.equal(p.model_version, 0);
  assert.ok(p.trial_id, "a tracked prediction has a trial id");

  const judged = await client.label(name, p.trial_id, "dog");
  assert.deepEqual(judged, {
    trial_id: p.trial_id,
    predicted: "cat",
    label: "dog",
    mistake: true,
    updated: true,
  });
  // the same label again gets the same answer; another one is a conflict
  assert.deepEqual(await client.label(name, p.trial_id, "dog"), judged);
  await assert.rejects(
    client.label(name, p.trial_id, "cat"),
    (e: unknown) => e instanceof Conflict && e.status === 409,
  );

  const model = await client.model(name);
  assert.equal(model.version, 1);
  assert.equal(model.counters.labelled, 1);
});

test("a prediction with an id of the caller's, and one not tracked", async () => {
  const name = modelName("ids");
  await client.createModel(perceptron(name));
  const p = await client.predict(name, X, { trialId: "photo-1" });
  assert.equal(p.trial_id, "photo-1");
  const untracked = await client.predict(name, X, { track: false });
  assert.equal(untracked.trial_id, null);
  assert.equal((await client.model(name)).counters.predictions, 1);
});

test("learn: a trial whose label is known, judged and learned", async () => {
  const name = modelName("learn");
  await client.createModel(perceptron(name));
  const first = await client.learn(name, X, "dog");
  assert.deepEqual(first, { predicted: "cat", label: "dog", mistake: true, updated: true });
  const second = await client.learn(name, X, "dog");
  assert.equal(second.predicted, "dog", "the learner learned from its mistake");
  assert.equal(second.mistake, false);
  assert.equal((await client.model(name)).version, 2);
});

test("batches: one item per request, a failed item alone", async () => {
  const name = modelName("batch");
  await client.createModel(perceptron(name));

  const predicted = await client.predictBatch(name, [X, { features: [1, 0, 1] }, { features: [0, 1] }], {
    trialIds: ["a", undefined, "c"],
  });
  assert.equal(predicted.length, 3);
  assert.equal(predicted[0]?.result?.trial_id, "a");
  assert.equal(predicted[1]?.result ?? null, null);
  assert.equal(predicted[1]?.error?.status, 422);
  assert.match(predicted[1]?.error?.message ?? "", /features has 3 values: expected 2/);
  assert.equal(predicted[2]?.result?.trial_id, "c");

  const labelled = await client.labelBatch(name, [
    ["a", "dog"],
    ["nope", "dog"],
    ["c", "cat"],
  ]);
  assert.deepEqual(
    labelled.map((i) => i.result?.mistake ?? i.error?.status),
    [true, 404, false],
  );

  const learned = await client.learnBatch(name, [
    [X, "dog"],
    [{ features: [0, 1] }, "cat"],
  ]);
  assert.equal(learned.length, 2);
  assert.ok(learned.every((i) => i.result && !i.error));
  assert.equal((await client.model(name)).version, 4);
});

test("4xx answers are typed errors with the service's message", async () => {
  const name = modelName("errors");
  await client.createModel(perceptron(name));

  await assert.rejects(client.stats(modelName("missing")), (e: unknown) => {
    assert.ok(e instanceof NotFound);
    assert.equal(e.status, 404);
    assert.match(String(e.detail), /does not exist/);
    assert.deepEqual(e.body, { detail: e.detail });
    return true;
  });
  await assert.rejects(client.predict(name, { features: [1, 0, 1] }), (e: unknown) => {
    assert.ok(e instanceof InvalidInput);
    assert.equal(e.status, 422);
    assert.equal(e.field, "instance");
    assert.match(e.message, /^422: instance: features has 3 values: expected 2$/);
    return true;
  });
  await assert.rejects(
    client.learn(name, X, "fox"),
    (e: unknown) => e instanceof InvalidInput && e.field === "label",
  );
  await assert.rejects(client.createModel(perceptron(name)), Conflict);
});

test("a number that JSON cannot carry is refused before anything is sent", async () => {
  const name = modelName("nan");
  await client.createModel(perceptron(name));
  await assert.rejects(client.learn(name, { features: [Number.NaN, 0] }, "dog"), RangeError);
  assert.equal((await client.model(name)).version, 0);
});

test("models: made, listed, read, exported, imported, deleted", async () => {
  const name = modelName("models");
  const made = await client.createModel(perceptron(name));
  assert.equal(made.name, name);
  assert.deepEqual(made.labels, ["cat", "dog"]);
  assert.ok((await client.models()).some((m) => m.name === name));
  assert.ok((await client.learners()).some((k) => k.kind === "perceptron"));

  await client.learn(name, X, "dog");
  const state = await client.state(name);
  assert.equal(state.model_version, 1);
  const copy = modelName("copy");
  await client.createModel(perceptron(copy));
  await client.putState(copy, state.state);
  assert.equal((await client.predict(copy, X)).label, "dog", "the copy predicts as the model learned");

  const fork = modelName("fork");
  assert.equal((await client.forkModel({ name: fork, from: { model: name } })).name, fork);
  assert.equal((await client.predict(fork, X)).label, "dog");

  await client.deleteModel(name);
  await assert.rejects(client.model(name), NotFound);
  assert.equal(await client.alive(), true);
  assert.equal(await client.ready(), true);
});
