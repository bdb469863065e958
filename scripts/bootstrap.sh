#!/usr/bin/env bash
# Create .venv and install arena-ls with everything its demo and tests need.
# The CPU build of PyTorch is pinned and installed first: any other torch
# requirement would make pip download a multi-GB CUDA build.
# Each step says what it does and how long it took (the whole install is
# about 1-2 minutes the first time, seconds after that).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
# setuptools reports every editable install with an "Editable installation" banner
# between `!!` lines; it is information, not a problem: keep it off the screen.
export PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}ignore:Editable installation"

step() {
    STEP_STARTED=$SECONDS
    echo "[bootstrap] $*"
}
done_step() {
    echo "[bootstrap]   done in $((SECONDS - STEP_STARTED)) s"
}

. scripts/venv-bin.sh
if [ ! -d "$VENV_BIN" ]; then
    step "1/4 creating the virtual environment .venv"
    "$PYTHON" -m venv .venv
    . scripts/venv-bin.sh
    done_step
else
    echo "[bootstrap] 1/4 .venv exists: updating it"
fi
step "2/4 upgrading pip"
"$VENV_BIN/python" -m pip install --quiet --upgrade pip
done_step
step "3/4 installing PyTorch (the pinned CPU build) and numpy"
"$VENV_BIN/python" -m pip install --quiet "torch==2.13.0" numpy
done_step
step "4/4 installing arena-ls (editable) with its test, plot, bench, ray and frameworks extras (ray: the cluster tests' head; frameworks: the trainer kit's end-to-end tests)"
"$VENV_BIN/python" -m pip install --quiet -e ".[test,plot,bench,ray,frameworks]"
done_step
echo "[bootstrap] ready: $VENV_BIN/arena and $VENV_BIN/arena-ls"
