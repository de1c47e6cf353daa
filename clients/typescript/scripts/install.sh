#!/bin/sh
# Installs the package's dependencies with `npm ci` when node_modules is missing or older
# than package-lock.json or package.json; otherwise does nothing. Run by ./run test and by
# tests/tooling/test_typescript_client.py.
set -eu
cd "$(dirname "$0")/.."
stamp=node_modules/.package-lock.json # npm writes it at each install
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
  echo "installing the TypeScript client's dependencies (npm ci)..." >&2
  npm ci --no-audit --no-fund >&2
fi
