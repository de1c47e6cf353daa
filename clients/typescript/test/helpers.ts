/** What the tests share: the services the Python test started, fresh model names, a model. */

import net from "node:net";
import type { AddressInfo } from "node:net";

import { Retry } from "../src/index.js";
import type { ModelCreate } from "../src/index.js";

function required(variable: string): string {
  const value = process.env[variable];
  if (!value) {
    throw new Error(
      `${variable} is not set: these tests run against the services that ` +
        "tests/tooling/test_typescript_client.py starts (or set it to a running service's URL)",
    );
  }
  return value;
}

/** A service with auth off. */
export const OPEN_URL = required("COMMITTEE_URL");
/** A service with auth on, and its bootstrap admin key. */
export const SECURED_URL = required("COMMITTEE_SECURED_URL");
export const ADMIN_KEY = required("COMMITTEE_SECURED_ADMIN_KEY");

/** Retries without long waits. */
export const FAST = new Retry({ attempts: 3, backoff: 10, jitter: 0 });

/** A model name of the calling test's own. */
export function modelName(what: string): string {
  return `ts-${what}-${globalThis.crypto.randomUUID().slice(0, 8)}`;
}

/** A perceptron over two features labelling "cat" or "dog": with its weights at zero it
 * predicts "cat", so a first "dog" is a mistake it learns from. */
export function perceptron(name: string): ModelCreate {
  return {
    name,
    labels: ["cat", "dog"],
    input: { attributes: { n_features: 2 } },
    learner: { kind: "perceptron" },
  };
}

export const X = { features: [1, 0] };

/** Poll `read` until `done` holds of its value (or `ms` milliseconds pass): the last value. */
export async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = 5_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A loopback address nothing listens on: connections to it are refused. */
export async function refusingUrl(): Promise<string> {
  const port = await new Promise<number>((resolve) => {
    const server = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
  return `http://127.0.0.1:${port}`;
}
