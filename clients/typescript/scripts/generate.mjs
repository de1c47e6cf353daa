// Writes the service's API types (src/schema.ts) from its OpenAPI document.
//   node scripts/generate.mjs [URL of the service] [output file]
// The URL defaults to COMMITTEE_URL, else http://127.0.0.1:8000. The test suite
// (tests/tooling/test_typescript_client.py) runs this against the live service and fails
// when the result differs from the committed file.
import { writeFile } from "node:fs/promises";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const base = process.argv[2] ?? process.env.COMMITTEE_URL ?? "http://127.0.0.1:8000";
const out = process.argv[3] ?? new URL("../src/schema.ts", import.meta.url);
const document = new URL("openapi.json", base.endsWith("/") ? base : `${base}/`);

// A field with a default stays optional: the request schemas give defaults to the
// fields a client may leave out (an instance's "features" or "experts"), which
// openapi-typescript would otherwise make required.
const ast = await openapiTS(document, { defaultNonNullable: false, silent: true });
await writeFile(out, COMMENT_HEADER + astToString(ast));
