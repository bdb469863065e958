#!/usr/bin/env bash
# Install arena-ls and run the demo: the bundled `tiny-lm` job through the
# language server, followed to the end with a live progress bar.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. scripts/venv-bin.sh
exec "$VENV_BIN/arena" demo "$@"
