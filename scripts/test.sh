#!/usr/bin/env bash
# Install everything the tests need and run them all: lint, types, the Python
# suite (real arena-ls over stdio, real processes), the editor clients' checks
# (Node tests, tsc, eslint, vsce package; a real headless Neovim), and the
# benchmarks in quick mode (run once, by tests/benchmarks/test_quick_bench.py; figures
# printed after pytest, nothing asserted on time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. scripts/venv-bin.sh

if ! command -v nvim >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing neovim (Debian package) for the Neovim end-to-end test"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
    else
        echo "== neovim is not installed and cannot be installed here: its test will be skipped"
    fi
fi

echo "== ruff (lint, and formatting: pyproject's [tool.ruff.format] leaves the position-sensitive fixtures alone)"
"$VENV_BIN/ruff" check arena_ls tests benchmarks
"$VENV_BIN/ruff" format --check arena_ls tests benchmarks
echo "== mypy (strict; both platform branches: linux and win32)"
"$VENV_BIN/mypy" arena_ls
"$VENV_BIN/mypy" --platform linux arena_ls
"$VENV_BIN/mypy" --platform win32 arena_ls
echo "== rules doc up to date"
"$VENV_BIN/python" -m arena_ls.gates.docs --check
echo "== editors' settings declarations up to date (package.json, settingsTable.ts, server_defaults.lua)"
"$VENV_BIN/python" -m arena_ls.settings_schema --check

if [ -f editor-client/vscode/ci.sh ] && command -v npm >/dev/null 2>&1; then
    echo "== VS Code extension: npm ci, tsc, eslint, node tests, vsce package"
    bash editor-client/vscode/ci.sh
fi

if [ -f editor-client/aide/ci.sh ] && command -v npm >/dev/null 2>&1; then
    echo "== AIDE client: npm ci, core bundle check, node tests on a real arena-ls, verify-gates.sh, the panel in Chromium"
    bash editor-client/aide/ci.sh
fi

echo "== pytest (its tests/benchmarks/test_quick_bench.py is CI's one run of the quick benchmarks)"
QUICK_BENCH_RESULTS="$PWD/benchmarks/results-quick.json"
rm -f "$QUICK_BENCH_RESULTS"
ARENA_QUICK_BENCH_RESULTS="$QUICK_BENCH_RESULTS" "$VENV_BIN/python" -m pytest -p no:cacheprovider "$@"
if [ -f "$QUICK_BENCH_RESULTS" ]; then
    echo "== benchmarks (quick mode, run by the test above: figures printed, nothing asserted on time)"
    "$VENV_BIN/python" -m benchmarks --show "$QUICK_BENCH_RESULTS"
fi

if [ -f editor-client/vscode/e2e/run.sh ] && command -v npm >/dev/null 2>&1; then
    echo "== VS Code extension in a real VS Code (code-server + headless Chromium; install cached in ~/.cache/arena-ls-e2e)"
    bash editor-client/vscode/e2e/run.sh
fi
