#!/usr/bin/env bash
# CI for the VS Code client: install exactly the locked packages, type-check,
# lint, run the Node unit tests, and build the .vsix (one esbuild bundle, no
# node_modules). Exits non-zero on the first failure. Needs node >= 20 and
# npm; never downloads VS Code. The real-VS-Code test is e2e/run.sh.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run lint
npm test # tsc -p ./ type-checks and compiles the sources and tests, then node --test runs them
npm run package
# The package must carry the bundle and nothing else that runs.
scripts=$(npx vsce ls --no-dependencies | grep -c '\.js$' || true)
if [ "$scripts" != 1 ]; then
    echo "arena-ls.vsix carries $scripts scripts; expected the one bundle (out/extension.js)" >&2
    npx vsce ls --no-dependencies >&2
    exit 1
fi
echo "arena-ls.vsix: $(npx vsce ls --no-dependencies | wc -l) files, one bundled script"
