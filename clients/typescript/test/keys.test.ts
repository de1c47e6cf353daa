/** API keys, against the service with auth on: made, listed and revoked by an admin, and
 * the answers to a missing, a revoked and a read-only key. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, Forbidden, Unauthorized } from "../src/index.js";
import { ADMIN_KEY, FAST, modelName, perceptron, SECURED_URL, until, X } from "./helpers.js";

const admin = new Client(SECURED_URL, { apiKey: ADMIN_KEY, retry: FAST });

test("without a key the service answers Unauthorized", async () => {
  const anonymous = new Client(SECURED_URL, { apiKey: "", retry: FAST });
  await assert.rejects(anonymous.models(), (e: unknown) => {
    assert.ok(e instanceof Unauthorized);
    assert.equal(e.status, 401);
    assert.match(String(e.detail), /an API key is needed/);
    return true;
  });
});

test("an admin makes, lists and revokes a key, which is then refused", async () => {
  const keyName = modelName("key");
  const made = await admin.createKey("write", { name: keyName, limits: { requests_per_second: 50 } });
  assert.equal(made.scope, "write");
  assert.equal(made.name, keyName);
  assert.equal(made.limits["requests_per_second"], 50);
  assert.ok(made.key.length >= 32, "the secret is in the answer");

  const listed = (await admin.apiKeys()).find((k) => k.id === made.id);
  assert.equal(listed?.name, keyName);
  assert.equal("key" in (listed ?? {}), false, "a listed key has no secret");

  const own = new Client(SECURED_URL, { apiKey: made.key, retry: FAST });
  const name = modelName("keyed");
  await admin.createModel(perceptron(name));
  assert.equal((await own.learn(name, X, "dog")).mistake, true);

  await admin.revokeKey(made.id);
  assert.equal(
    (await admin.apiKeys()).some((k) => k.id === made.id),
    false,
  );
  const refused = await until(
    () =>
      own.stats(name).then(
        () => null,
        (e: unknown) => e,
      ),
    (e) => e !== null,
  );
  assert.ok(refused instanceof Unauthorized, `a revoked key is refused, got ${String(refused)}`);

  const audit = await admin.audit(50);
  assert.ok(
    audit.some((entry) => JSON.stringify(entry).includes(made.id)),
    "the audit log names the key",
  );
});

test("a read key reads, and its writes are refused with Forbidden", async () => {
  const name = modelName("read");
  await admin.createModel(perceptron(name));
  const made = await admin.createKey("read", { name: name });
  const reader = new Client(SECURED_URL, { apiKey: made.key, retry: FAST });

  assert.equal((await reader.model(name)).name, name);
  await assert.rejects(reader.learn(name, X, "dog"), (e: unknown) => {
    assert.ok(e instanceof Forbidden);
    assert.equal(e.status, 403);
    assert.ok(typeof e.detail === "string" && e.detail.length > 0, "the service's message");
    return true;
  });
  // the stream needs a write key: the service closes it with 4403
  await assert.rejects(async () => {
    const s = await reader.stream(name);
    try {
      await s.predict(X);
    } finally {
      await s.close();
    }
  }, Forbidden);
  assert.equal((await admin.model(name)).version, 0);
});

test("a write key streams: the handshake carries the key", async () => {
  const name = modelName("ws-key");
  await admin.createModel(perceptron(name));
  const made = await admin.createKey("write", { name });
  const writer = new Client(SECURED_URL, { apiKey: made.key, retry: FAST });
  const s = await writer.stream(name);
  try {
    const p = await s.predict(X);
    assert.equal((await s.label(p.trial_id ?? "", "dog")).mistake, true);
  } finally {
    await s.close();
  }
  assert.equal((await admin.model(name)).counters.labelled, 1);
});
