#!/usr/bin/env bash
# Create .venv and install arena-ls with everything its demo and tests need.
# The CPU build of PyTorch is pinned and installed first: any other torch
# requirement would make pip download a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0" numpy
.venv/bin/python -m pip install --quiet -e ".[test,plot,bench]"
