/** The WebSocket stream: requests pipelined over one connection, answered in order. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, ConnectionFailed, Forbidden, InvalidInput, NotFound } from "../src/index.js";
import { FAST, modelName, OPEN_URL, perceptron, refusingUrl, X } from "./helpers.js";

const client = new Client(OPEN_URL, { retry: FAST });

test("a prediction and its label over the stream", async () => {
  const name = modelName("stream");
  await client.createModel(perceptron(name));
  const s = await client.stream(name);
  try {
    const p = await s.predict(X);
    assert.equal(p.label, "cat");
    assert.ok(p.trial_id);
    const judged = await s.label(p.trial_id, "dog");
    assert.deepEqual(judged, {
      trial_id: p.trial_id,
      predicted: "cat",
      label: "dog",
      mistake: true,
      updated: true,
    });
    const learned = await s.learn(X, "dog");
    assert.equal(learned.predicted, "dog");
  } finally {
    await s.close();
  }
  const model = await client.model(name);
  assert.equal(model.version, 2);
  assert.equal(model.counters.labelled, 1);
  assert.equal(model.counters.learned, 1);
});

test("many requests in flight, answered one each, in order", async () => {
  const name = modelName("many");
  await client.createModel(perceptron(name));
  const s = await client.stream(name, { window: 3 });
  try {
    const xs = Array.from({ length: 20 }, (_, i) => ({ features: [i % 2, 1 - (i % 2)] }));
    const predicted = await s.predictMany(xs);
    assert.equal(predicted.length, 20);
    const ids = predicted.map((item) => item.result?.trial_id ?? "");
    assert.equal(new Set(ids).size, 20, "each prediction has its own trial id");
    const labelled = await s.labelMany(ids.map((id, i) => [id, i % 2 ? "cat" : "dog"]));
    assert.deepEqual(
      labelled.map((item) => item.result?.trial_id),
      ids,
    );
    const learned = await s.learnMany(xs.map((x) => [x, "dog"]));
    assert.ok(learned.every((item) => item.result && !item.error));
  } finally {
    await s.close();
  }
  assert.equal((await client.model(name)).version, 40);
});

test("a failed request is a typed error, and the stream goes on", async () => {
  const name = modelName("stream-error");
  await client.createModel(perceptron(name));
  const s = await client.stream(name);
  try {
    await assert.rejects(s.predict({ features: [1, 0, 1] }), (e: unknown) => {
      assert.ok(e instanceof InvalidInput);
      assert.match(e.message, /features has 3 values: expected 2/);
      return true;
    });
    assert.equal((await s.learn(X, "dog")).mistake, true);
  } finally {
    await s.close();
  }
  // closed: a request now fails at once
  await assert.rejects(s.learn(X, "dog"), ConnectionFailed);
});

test("a stream to a model that does not exist ends with NotFound", async () => {
  await assert.rejects(async () => {
    const s = await client.stream(modelName("missing"));
    try {
      await s.predict(X);
    } finally {
      await s.close();
    }
  }, NotFound);
});

test("a handshake the service refuses is a typed error", async () => {
  const name = modelName("origin");
  await client.createModel(perceptron(name));
  // a page of another origin may not open a stream: refused with a 403 before the upgrade
  const page = new Client(OPEN_URL, { headers: { Origin: "http://elsewhere.example" } });
  await assert.rejects(page.stream(name), (e: unknown) => e instanceof Forbidden && e.status === 403);
});

test("a stream that cannot connect fails as not sent", async () => {
  const nowhere = new Client(await refusingUrl());
  await assert.rejects(nowhere.stream("any"), (e: unknown) => e instanceof ConnectionFailed && !e.sent);
});
