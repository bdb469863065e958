#!/usr/bin/env bash
# Installs what the real-VS-Code end-to-end test needs, without downloading a
# browser or VS Code from a CDN: Debian's chromium, chromium-driver, ripgrep
# and the headers code-server's native modules build against; code-server
# from the npm registry; Selenium from PyPI in a venv of its own.
#
# Idempotent: everything lands in $ARENA_E2E_CACHE (default
# ~/.cache/arena-ls-e2e), which survives between CI runs on the same machine;
# a second call finds it there and returns in a second.
#
# Prints the cache folder's layout on success. Exits non-zero when something
# cannot be installed (for instance: not root and the Debian packages are missing).
set -euo pipefail

CODE_SERVER_VERSION="4.100.3"
SELENIUM_VERSION="4.*"
PYTEST_VERSION="8.*"
CACHE="${ARENA_E2E_CACHE:-$HOME/.cache/arena-ls-e2e}"
PYTHON="${ARENA_E2E_PYTHON:-python3}"
DEBIAN_PACKAGES=(libkrb5-dev libxkbfile-dev libsecret-1-dev ripgrep chromium chromium-driver)
# @vscode/ripgrep's postinstall looks for this archive before it downloads one.
RIPGREP_PACKAGE_VERSION="1.15.11"
RIPGREP_ASSET="ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz"

started=$(date +%s)
mkdir -p "$CACHE"

missing_debian_packages() {
    local missing=()
    for package in "${DEBIAN_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    echo "${missing[@]:-}"
}

install_debian_packages() {
    local missing
    missing=$(missing_debian_packages)
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "e2e setup: missing Debian packages ($missing) and not root with apt-get" >&2
        return 1
    fi
    echo "e2e setup: apt-get install $missing"
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
}

seed_ripgrep_cache() {
    local seed="$CACHE/tmp/vscode-ripgrep-cache-$RIPGREP_PACKAGE_VERSION"
    [ -f "$seed/$RIPGREP_ASSET" ] && return 0
    mkdir -p "$seed" "$CACHE/tmp/rg"
    cp /usr/bin/rg "$CACHE/tmp/rg/rg"
    tar -czf "$seed/$RIPGREP_ASSET" -C "$CACHE/tmp/rg" rg
}

install_code_server() {
    local prefix="$CACHE/code-server-$CODE_SERVER_VERSION"
    [ -x "$prefix/node_modules/.bin/code-server" ] && [ -f "$prefix/.complete" ] && return 0
    echo "e2e setup: npm install code-server@$CODE_SERVER_VERSION (a few minutes)"
    seed_ripgrep_cache
    rm -rf "$prefix"
    mkdir -p "$prefix"
    echo '{"name": "arena-ls-e2e-code-server", "private": true}' >"$prefix/package.json"
    # node-pty's install runs `npx node-gyp`: npm_config_yes answers npx's prompt;
    # code-server's postinstall refuses to run as root without unsafe_perm.
    (cd "$prefix" && TMPDIR="$CACHE/tmp" npm_config_yes=true npm_config_unsafe_perm=true \
        npm install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION")
    touch "$prefix/.complete"
}

install_selenium() {
    local venv="$CACHE/venv"
    [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import selenium, pytest" 2>/dev/null && return 0
    echo "e2e setup: a venv with selenium and pytest"
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    # pip's notes about local index folders are noise here; its errors still show.
    "$venv/bin/python" -m pip install -q "selenium==$SELENIUM_VERSION" "pytest==$PYTEST_VERSION" 2>&1 |
        { grep -v "^WARNING: Location" || true; }
    "$venv/bin/python" -c "import selenium, pytest"
}

install_debian_packages
install_code_server
install_selenium
echo "e2e setup: ready in $CACHE ($(($(date +%s) - started)) s)"
