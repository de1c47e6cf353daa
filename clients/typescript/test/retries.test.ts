/** Retries: which calls are tried again after which failures, and that a retried write is
 * applied once (its Idempotency-Key, a predict's trial id). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, CommitteeError, ConnectionFailed, RateLimited, Retry, Unavailable } from "../src/index.js";
import type { RetryEvent } from "../src/index.js";
import { ADMIN_KEY, FAST, modelName, OPEN_URL, perceptron, refusingUrl, SECURED_URL, X } from "./helpers.js";
import { DroppingProxy } from "./proxy.js";

const direct = new Client(OPEN_URL, { retry: FAST });

/** A client through `proxy` that records its retries. */
function through(proxy: DroppingProxy, apiKey?: string): { client: Client; retries: RetryEvent[] } {
  const retries: RetryEvent[] = [];
  const client = new Client(proxy.url, {
    retry: FAST,
    onRetry: (event) => retries.push(event),
    ...(apiKey === undefined ? {} : { apiKey }),
  });
  return { client, retries };
}

test("a learn sent twice with one Idempotency-Key is learned once", async () => {
  const name = modelName("idem");
  await direct.createModel(perceptron(name));
  const first = await direct.learn(name, X, "dog", { idempotencyKey: "learn-1" });
  const again = await direct.learn(name, X, "dog", { idempotencyKey: "learn-1" });
  assert.deepEqual(again, first, "the first answer, again");
  assert.equal((await direct.model(name)).version, 1);
  await direct.learn(name, X, "dog", { idempotencyKey: "learn-2" });
  assert.equal((await direct.model(name)).version, 2, "another key is another trial");
});

test("a learn whose answer is lost is retried and learned once", async () => {
  const name = modelName("dropped");
  await direct.createModel(perceptron(name));
  const proxy = await DroppingProxy.start(OPEN_URL, 1);
  try {
    const { client, retries } = through(proxy);
    const learned = await client.learn(name, X, "dog");
    assert.deepEqual(learned, { predicted: "cat", label: "dog", mistake: true, updated: true });
    assert.equal(retries.length, 1);
    assert.ok(retries[0]?.error instanceof ConnectionFailed && retries[0].error.sent);
    assert.equal(proxy.connections, 2, "the request reached the service twice");
  } finally {
    await proxy.close();
  }
  const model = await direct.model(name);
  assert.equal(model.version, 1, "one trial in the model's log");
  assert.equal(model.counters.learned, 1);
});

test("a learn batch whose answer is lost is retried and learned once", async () => {
  const name = modelName("dropped-batch");
  await direct.createModel(perceptron(name));
  const proxy = await DroppingProxy.start(OPEN_URL, 1);
  try {
    const { client, retries } = through(proxy);
    const items = await client.learnBatch(name, [
      [X, "dog"],
      [X, "dog"],
    ]);
    assert.equal(items.length, 2);
    assert.equal(retries.length, 1);
  } finally {
    await proxy.close();
  }
  assert.equal((await direct.model(name)).version, 2);
});

test("a prediction whose answer is lost is retried under its trial id: one trial", async () => {
  const name = modelName("dropped-predict");
  await direct.createModel(perceptron(name));
  const proxy = await DroppingProxy.start(OPEN_URL, 1);
  let trialId: string | null;
  try {
    const { client, retries } = through(proxy);
    trialId = (await client.predict(name, X)).trial_id;
    assert.equal(retries.length, 1);
  } finally {
    await proxy.close();
  }
  assert.equal((await direct.model(name)).counters.predictions, 1);
  assert.equal((await direct.label(name, trialId ?? "", "dog")).mistake, true);
});

test("making a key is not retried once it may have arrived", async () => {
  const keyName = modelName("once");
  const proxy = await DroppingProxy.start(SECURED_URL, 1);
  try {
    const { client, retries } = through(proxy, ADMIN_KEY);
    await assert.rejects(client.createKey("read", { name: keyName }), (e: unknown) => {
      assert.ok(e instanceof ConnectionFailed);
      assert.equal(e.status, null);
      assert.equal(e.sent, true);
      return true;
    });
    assert.equal(retries.length, 0);
    assert.equal(proxy.connections, 1);
  } finally {
    await proxy.close();
  }
  const admin = new Client(SECURED_URL, { apiKey: ADMIN_KEY, retry: FAST });
  const made = (await admin.apiKeys()).filter((k) => k.name === keyName);
  assert.equal(made.length, 1, "the key was made, once");
});

test("a refused connection is retried, then fails as not sent", async () => {
  const retries: RetryEvent[] = [];
  const client = new Client(await refusingUrl(), {
    retry: new Retry({ attempts: 2, backoff: 1, jitter: 0 }),
    onRetry: (event) => retries.push(event),
  });
  // not idempotent, and retried all the same: the request cannot have arrived
  await assert.rejects(client.createKey("read"), (e: unknown) => e instanceof ConnectionFailed && !e.sent);
  assert.equal(retries.length, 1);
  assert.equal(await client.alive(), false);
});

test("the retry policy: backoff, its cap, Retry-After, and what is retried", () => {
  const policy = new Retry({ attempts: 4, backoff: 500, multiplier: 2, maxDelay: 3_000, jitter: 0 });
  assert.deepEqual(
    [1, 2, 3].map((n) => policy.delay(n)),
    [500, 1_000, 2_000],
  );
  assert.equal(policy.delay(5), 3_000);
  assert.equal(policy.delay(1, 2_000), 2_000, "Retry-After when longer");

  const dropped = new ConnectionFailed("cut", true);
  assert.equal(policy.after(dropped, 1, true), 500);
  assert.equal(policy.after(dropped, 1, false), null, "may have arrived: not idempotent, not retried");
  assert.equal(policy.after(new ConnectionFailed("refused", false), 1, false), 500);
  assert.equal(policy.after(new RateLimited(429, "slow down", null, 1_000), 1, false), 1_000);
  assert.equal(policy.after(new Unavailable(503, "busy"), 1, false), null);
  assert.equal(policy.after(new CommitteeError(400, "bad"), 1, true), null);
  assert.equal(policy.after(dropped, 4, true), null, "after the last attempt");
  assert.throws(() => new Retry({ attempts: 0 }), /attempts must be an integer >= 1, got 0/);
});
