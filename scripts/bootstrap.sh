#!/usr/bin/env bash
# Create .venv and install arena-ls with everything its demo and tests need.
# The CPU build of PyTorch is pinned and installed first: any other torch
# requirement would make pip download a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/venv-bin.sh
if [ ! -d "$VENV_BIN" ]; then
    "$PYTHON" -m venv .venv
    . scripts/venv-bin.sh
fi
"$VENV_BIN/python" -m pip install --quiet --upgrade pip
"$VENV_BIN/python" -m pip install --quiet "torch==2.13.0" numpy
"$VENV_BIN/python" -m pip install --quiet -e ".[test,plot,bench]"
