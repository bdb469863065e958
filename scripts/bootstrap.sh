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

# Bytecode. Where Python writes it (PYTHONDONTWRITEBYTECODE unset, Python's default; CI's
# scripts/test.sh), each module is compiled at its first import and kept: of the packages' 16,600
# modules the demo and the tests import about a quarter, so the installer installs without compiling
# (--no-compile), and step 5 imports what the tests' first processes import, PyTorch with its
# first optimizer's torch._dynamo, SymPy, numpy and every module of arena-ls (each would compile
# them for itself: they start together), in two processes at once (scripts/bytecode_ahead.py).
# Where it does not (the variable set: no process would ever keep what it compiled), until a whole
# install has been compiled once (the marker below), the installer installs without compiling and the
# packages are compiled afterwards on every core at once: pip compiles one file after another, a
# minute of one core while the other often waits (docs/performance.md, "Bootstrap's bytecode").
# The marker is written only after that compile, so an install cut short is compiled by the next
# bootstrap; after it, pip's own compiling does: it compiles only what it installs.
. scripts/venv-bin.sh
if [ ! -d "$VENV_BIN" ]; then
    step "1/5 creating the virtual environment .venv"
    "$PYTHON" -m venv .venv
    . scripts/venv-bin.sh
    done_step
else
    echo "[bootstrap] 1/5 .venv exists: updating it"
fi
COMPILED_MARKER=.venv/.arena-packages-compiled
PIP_COMPILE=()
if [ -z "${PYTHONDONTWRITEBYTECODE:-}" ] || [ ! -e "$COMPILED_MARKER" ]; then
    PIP_COMPILE=(--no-compile)
fi
# The installer: uv (https://github.com/astral-sh/uv) where it installs and can be told pip's
# configuration (scripts/uv_args.py: the same indexes, wheel folders and constraints), pip
# otherwise. The same packages either way; uv unpacks them in parallel: 7-10 s for what pip
# took 55 s (docs/performance.md, "Bootstrap with uv").
UV_ENV=()
UV_ARGS=()
use_uv() { # pip's configuration first: where uv cannot be told it, uv is not installed at all
    local configured line
    configured="$("$VENV_BIN/python" scripts/uv_args.py)" || return 1
    "$VENV_BIN/python" -m pip install --quiet uv >/dev/null 2>&1 || return 1
    while IFS= read -r line; do
        if [[ "$line" =~ ^[A-Z_]+= ]]; then UV_ENV+=("$line"); else UV_ARGS+=("$line"); fi
    done <<<"$configured"
    "$VENV_BIN/uv" --version >/dev/null 2>&1
}
install() { # install PIP_ARGUMENTS...: with uv if chosen (pip from then on if uv fails), else pip
    if [ "$INSTALLER" = uv ]; then
        local compile=(--compile-bytecode) # bytecode as PIP_COMPILE says
        [ "${#PIP_COMPILE[@]}" = 0 ] || compile=()
        if env "${UV_ENV[@]}" "$VENV_BIN/uv" pip install --quiet --python "$VENV_BIN/python" \
            "${UV_ARGS[@]}" "${compile[@]}" "$@"; then
            return 0
        fi
        echo "[bootstrap]   uv could not install it (above): installing with pip instead"
        INSTALLER=pip
    fi
    "$VENV_BIN/python" -m pip install --quiet "${PIP_COMPILE[@]}" "$@"
}
step "2/5 choosing the installer (uv, else pip) and upgrading pip"
if use_uv; then
    INSTALLER=uv
else
    INSTALLER=pip
fi
install --upgrade pip
echo "[bootstrap]   installing with $INSTALLER"
done_step
step "3/5 installing PyTorch (the pinned CPU build) and numpy"
install "torch==2.13.0" numpy
done_step
step "4/5 installing arena-ls (editable) with its test, plot, bench, ray and frameworks extras (ray: the cluster tests' head; frameworks: the trainer kit's end-to-end tests)"
install -e ".[test,plot,bench,ray,frameworks]"
done_step
PACKAGES="$("$VENV_BIN/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ -z "${PYTHONDONTWRITEBYTECODE:-}" ]; then
    step "5/5 importing what the first processes import (PyTorch; SymPy, numpy and every module of arena-ls), two at once: Python keeps their bytecode (the rest is compiled as it is first imported)"
    # Importing compiles exactly what is used (some 2,300 modules, not the packages' 6,100 whole),
    # and arena-ls's own dependencies too: a server must never compile a module on its event loop.
    "$VENV_BIN/python" scripts/bytecode_ahead.py trainer &
    TRAINER_AHEAD=$!
    "$VENV_BIN/python" scripts/bytecode_ahead.py arena-ls
    wait "$TRAINER_AHEAD"
    done_step
elif [ "${#PIP_COMPILE[@]}" != 0 ]; then
    step "5/5 compiling the installed packages, on every core"
    "$VENV_BIN/python" -m compileall -qq -j 0 "$PACKAGES" || true # -qq: as above
    : >"$COMPILED_MARKER"
    done_step
else
    echo "[bootstrap] 5/5 the packages were compiled as they were installed"
fi
echo "[bootstrap] ready: $VENV_BIN/arena and $VENV_BIN/arena-ls"
