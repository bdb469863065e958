#!/usr/bin/env bash
# CI for the VS Code client: install exactly the locked packages, type-check,
# lint, run the Node unit tests, and build the .vsix. Exits non-zero on the
# first failure. Needs node >= 20 and npm; never downloads VS Code.
set -euo pipefail
cd "$(dirname "$0")"
npm ci
npm run typecheck
npm run lint
npm test
npx vsce package --allow-missing-repository --out arena-ls.vsix
