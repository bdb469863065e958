#!/usr/bin/env bash
# CI for the AIDE client (editor-client/aide): install exactly the locked npm
# packages, check that lib/core.mjs is the bundle of editor-client/vscode/src/core/
# as committed, run the Node tests against a real arena-ls (../../.venv/bin/arena-ls:
# routes, refusals, SSE resume, arena-ls crashes, the browser-world attacks, and
# verify-gates.sh on the reference job), then the panel in Debian's Chromium
# (puppeteer-core, no browser download; screenshots in e2e/out/).
# Called by scripts/test.sh; exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")"
started=$(date +%s)

if [ ! -x ../../.venv/bin/arena-ls ] && [ -z "${ARENA_LS_BIN:-}" ]; then
    echo "aide ci: ../../.venv/bin/arena-ls is missing (run scripts/bootstrap.sh)" >&2
    exit 1
fi

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing chromium and chromium-driver (Debian packages) for the panel's browser test"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi

npm ci --no-audit --no-fund --loglevel=error
node build-core.mjs --check
node --test --test-reporter=spec --test-concurrency=4 test/*.test.mjs
if command -v chromium >/dev/null 2>&1; then
    rm -rf e2e/out
    node --test --test-reporter=spec e2e/*.test.mjs
    echo "aide ci: screenshots in editor-client/aide/e2e/out/: $(ls e2e/out | tr '\n' ' ')"
else
    echo "aide ci: chromium is not installed and cannot be installed here: the panel's browser test is skipped" >&2
fi
echo "aide ci: done in $(( $(date +%s) - started )) s"
