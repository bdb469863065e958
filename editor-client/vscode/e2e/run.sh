#!/usr/bin/env bash
# The extension in a real VS Code: installs what it needs (setup.sh, cached
# in ~/.cache/arena-ls-e2e), packages the .vsix, and runs the end-to-end
# test in code-server with a headless Chromium. The server runs on the
# repository's .venv (scripts/bootstrap.sh makes it). Screenshots, the page
# and the logs of a failed test go to $ARENA_E2E_SCREENSHOTS (default
# editor-client/vscode/e2e/screenshots/). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
extension="$(cd "$here/.." && pwd)"
repo="$(cd "$extension/../.." && pwd)"
cache="${ARENA_E2E_CACHE:-$HOME/.cache/arena-ls-e2e}"

started=$(date +%s)
bash "$here/setup.sh"
setup_done=$(date +%s)

(
    cd "$extension"
    [ -d node_modules ] || npm ci --no-audit --no-fund
    # The .vsix that ci.sh built (CI runs it first) is tested as it is; packaged again when missing
    # or older than anything it is built from.
    if [ ! -f arena-ls.vsix ] ||
        [ -n "$(find src package.json package-lock.json esbuild.mjs tsconfig.json .vscodeignore \
            -newer arena-ls.vsix -print -quit 2>/dev/null)" ]; then
        npm run --silent package >/dev/null
    fi
)

export ARENA_E2E_CODE_SERVER="$cache/code-server-4.100.3/node_modules/.bin/code-server"
export ARENA_E2E_VSIX="$extension/arena-ls.vsix"
export ARENA_E2E_SERVER_PYTHON="${ARENA_E2E_SERVER_PYTHON:-$repo/.venv/bin/python}"
export ARENA_E2E_REPO="$repo"
export ARENA_E2E_SCREENSHOTS="${ARENA_E2E_SCREENSHOTS:-$here/screenshots}"
export SE_OFFLINE=true
rm -rf "$ARENA_E2E_SCREENSHOTS"

status=0
"$cache/venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" -v "$here" "$@" || status=$?
echo "e2e: setup $((setup_done - started)) s, package and test $(($(date +%s) - setup_done)) s"
if [ "$status" != 0 ]; then
    echo "e2e: screenshots and logs of the failure are under $ARENA_E2E_SCREENSHOTS" >&2
fi
exit "$status"
