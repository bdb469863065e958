#!/usr/bin/env bash
# Install everything the tests need and run them all: lint, types, the Python
# suite (real arena-ls over stdio, real processes), the editor clients' checks
# (Node tests, tsc, eslint, vsce package; a real headless Neovim; VS Code and the
# AIDE panel in Chromium), and the benchmarks in quick mode (run once, by
# tests/benchmarks/test_quick_bench.py; figures printed after pytest, nothing
# asserted on time).
#
# Each stage prints `== stage` when it starts and `== stage (N s)` when it ends, and
# the times are listed again at the end. To fit two cores, the work runs in four
# lanes at once (docs/performance.md, "CI's stages and times"):
#   - pytest, in the foreground, on ARENA_TEST_WORKERS workers (pytest-xdist, default 4:
#     most tests wait on real trainers and agents rather than burn CPU; the whole suite used
#     128 % of two cores on 3 workers, 146 % on 4, 972 s against 901 s: docs/performance.md);
#   - "types" in the background: mypy (linux and win32) and the rules doc check;
#   - "vscode" in the background from the start: the VS Code extension's checks (Node only),
#     while bootstrap installs Python on one core;
#   - "editors" in the background: the AIDE client's checks, then the extension in a real
#     VS Code (once the "vscode" lane, which reinstalls its node_modules, has ended).
# A background lane's output goes to a log printed whole at the end; CI fails if any
# lane or pytest failed (every lane is waited for, so every failure is shown).
# ARENA_TEST_WORKERS=0 runs pytest in one process and every stage one after the other.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
CI_STARTED=$SECONDS
# One OpenMP thread for each PyTorch the tests run (tests/conftest.py says why: on two busy cores a
# trainer's second thread spins for nothing, 2.5-3 times its CPU); here for the lanes too (the AIDE
# client's verify-gates.sh trains the reference job, the VS Code end-to-end test runs it on Ray).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# Python's default: each module is compiled at its first import and its bytecode kept, by every
# process CI starts. Where the machine sets PYTHONDONTWRITEBYTECODE (this project's do, as many
# containers), bootstrap compiled all 16,600 modules of the packages ahead, about 60 s of CPU, for the
# quarter of them the tests import; now it imports ahead what the first processes import (PyTorch,
# SymPy, numpy, arena-ls's modules: scripts/bootstrap.sh, scripts/bytecode_ahead.py).
unset PYTHONDONTWRITEBYTECODE
WORKERS="${ARENA_TEST_WORKERS:-4}"
LANE_LOGS="$(mktemp -d "${TMPDIR:-/tmp}/arena-ci.XXXXXX")"
STAGE_TIMES="$LANE_LOGS/stage-times"
: >"$STAGE_TIMES"

timed() { # timed NAME COMMAND...: run COMMAND as the stage NAME, saying how long it took; its status
    local name=$1 started=$SECONDS status=0
    shift
    echo "== $name"
    "$@" || status=$?
    local took=$((SECONDS - started))
    echo "== $name ($took s$([ "$status" = 0 ] || echo ", FAILED: exit status $status"))"
    printf '%s\t%s\n' "$name" "$took" >>"$STAGE_TIMES"
    return "$status"
}

install_neovim() {
    if command -v nvim >/dev/null 2>&1; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing neovim (Debian package) for the Neovim end-to-end test"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq neovim >/dev/null
    else
        echo "neovim is not installed and cannot be installed here: its test will be skipped"
    fi
}

install_dbus() { # a dbus-daemon of the laptop tests' own (keep-awake's logind, notifications): tests/helpers/dbus.py
    if command -v dbus-daemon >/dev/null 2>&1; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing dbus (Debian package) for the keep-awake and notification tests"
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dbus >/dev/null
    else
        echo "dbus-daemon is not installed and cannot be installed here: the D-Bus tests will be skipped"
    fi
}

bytecode() {
    # Each of the ~1,800 Python processes the suite starts (servers, agents, clients, trainers)
    # imports the repository's modules; where PYTHONDONTWRITEBYTECODE is set none of them keeps
    # what it compiled (a server spent 0.15 s of its 1 s start compiling arena_ls), and even where
    # Python writes it, the first processes, started at once, would each compile them. Compiled
    # once here (2 s), they are read instead: docs/performance.md.
    "$VENV_BIN/python" -m compileall -q -j 0 arena_ls arena_trainer.py tests training benchmarks >/dev/null
}

lint() { # (&&: a function run by `timed` does not stop at a failure by itself)
    # pyproject's [tool.ruff.format] leaves the position-sensitive fixtures alone
    "$VENV_BIN/ruff" check arena_ls tests benchmarks &&
        "$VENV_BIN/ruff" format --check arena_ls tests benchmarks
}

types_lane() {
    # `mypy arena_ls` on this Linux machine is `--platform linux`: each platform branch once
    timed "mypy --strict, linux" "$VENV_BIN/mypy" --platform linux arena_ls
    timed "mypy --strict, win32" "$VENV_BIN/mypy" --platform win32 arena_ls
    timed "rules doc up to date" "$VENV_BIN/python" -m arena_ls.gates.docs --check
    timed "editors' settings declarations up to date (package.json, settingsTable.ts, server_defaults.lua)" \
        "$VENV_BIN/python" -m arena_ls.settings_schema --check
    timed "clients' words up to date (wording.ts, wording.lua, wording_cases.json from arena_ls/wording.py)" \
        "$VENV_BIN/python" -m arena_ls.wording_gen --check
}

vscode_checks_lane() { # Node only, so it runs while bootstrap installs Python (which keeps one core busy)
    if ! command -v npm >/dev/null 2>&1; then
        echo "npm is not installed: the editor clients' checks (VS Code, AIDE, VS Code e2e) are skipped" >&2
        return 0
    fi
    if [ -f editor-client/vscode/ci.sh ]; then # 9>&-: the lock below is the lane's, not npm's
        timed "VS Code extension: npm ci, tsc, eslint, node tests, vsce package" bash editor-client/vscode/ci.sh 9>&-
    fi
}

VSCODE_CHECKS_LOCK="$LANE_LOGS/vscode-checks.lock"
start_vscode_checks() { # the lane holds VSCODE_CHECKS_LOCK until it ends (wait_for_vscode_checks)
    if [ "$WORKERS" = 0 ]; then
        vscode_checks_lane
        return
    fi
    exec 9>"$VSCODE_CHECKS_LOCK"
    flock 9
    start_lane vscode vscode_checks_lane
    exec 9>&-
}

wait_for_vscode_checks() { # the e2e installs the extension those checks build (and reinstall the node_modules of)
    if [ -e "$VSCODE_CHECKS_LOCK" ]; then
        flock "$VSCODE_CHECKS_LOCK" true
    fi
}

editors_lane() {
    if ! command -v npm >/dev/null 2>&1; then
        return 0 # said by the vscode lane
    fi
    if [ -f editor-client/aide/ci.sh ]; then
        timed "AIDE client: npm ci, core bundle, node tests on a real arena-ls, verify-gates.sh, the panel in Chromium" \
            bash editor-client/aide/ci.sh
    fi
    wait_for_vscode_checks
    if [ -f editor-client/vscode/e2e/run.sh ]; then
        timed "VS Code extension in a real VS Code (code-server + headless Chromium; cached in ~/.cache/arena-ls-e2e)" \
            bash editor-client/vscode/e2e/run.sh
    fi
}

run_pytest() {
    local parallel=()
    if [ "$WORKERS" != 0 ]; then
        parallel=(-n "$WORKERS") # --dist loadgroup: tests/helpers/xdist_groups.py
    fi
    ARENA_QUICK_BENCH_RESULTS="$QUICK_BENCH_RESULTS" \
        "$VENV_BIN/python" -m pytest -p no:cacheprovider --durations=25 "${parallel[@]}" "$@"
}

LANES=()
LANE_PIDS=()
start_lane() { # start_lane NAME FUNCTION: in the background (or now, with ARENA_TEST_WORKERS=0)
    if [ "$WORKERS" = 0 ]; then
        "$2"
        return
    fi
    set -m # job control: the lane gets a process group of its own, which stop_lanes can end whole
    ("$2") >"$LANE_LOGS/$1.log" 2>&1 &
    set +m
    LANES+=("$1")
    LANE_PIDS+=("$!")
    echo "== lane $1 started in the background (its log is printed at the end)"
}

stop_lanes() { # on an early exit: end the lanes still running (their process groups), so nothing outlives CI
    local pid
    for pid in "${LANE_PIDS[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
}
trap stop_lanes EXIT

start_vscode_checks
timed "bootstrap (.venv, PyTorch CPU, arena-ls with its test, plot, bench, ray and frameworks extras)" bash scripts/bootstrap.sh
. scripts/venv-bin.sh
timed "neovim (for the Neovim end-to-end test)" install_neovim
timed "dbus (for the keep-awake and notification tests)" install_dbus
timed "bytecode (the repository's modules compiled once for every process the tests start)" bytecode
timed "ruff (lint and formatting)" lint

start_lane types types_lane
start_lane editors editors_lane

collect_once() {
    # One collection before the workers': it writes what each of them would otherwise make for
    # itself on a fresh checkout, the test modules rewritten for their asserts (tests/conftest.py)
    # and the process marks (~/.cache/arena-ls): 12 s of CPU once instead of four times. Its
    # errors are the run's own, reported by the run below.
    "$VENV_BIN/python" -m pytest -p no:cacheprovider --collect-only -q "$@" >/dev/null 2>&1 || true
}
if [ "$WORKERS" != 0 ]; then
    timed "collection, once for the workers" collect_once "$@"
fi

QUICK_BENCH_RESULTS="$PWD/benchmarks/results-quick.json"
rm -f "$QUICK_BENCH_RESULTS"
failed=()
timed "pytest on $WORKERS workers (its tests/benchmarks/test_quick_bench.py is CI's one run of the quick benchmarks)" \
    run_pytest "$@" || failed+=("pytest")
if [ -f "$QUICK_BENCH_RESULTS" ]; then
    echo "== benchmarks (quick mode, run by the test above: figures printed, nothing asserted on time)"
    "$VENV_BIN/python" -m benchmarks --show "$QUICK_BENCH_RESULTS"
fi

for i in "${!LANES[@]}"; do
    status=0
    wait "${LANE_PIDS[$i]}" || status=$?
    echo "== lane ${LANES[$i]}: its log (exit status $status)"
    cat "$LANE_LOGS/${LANES[$i]}.log"
    echo "== lane ${LANES[$i]}: end of its log"
    if [ "$status" != 0 ]; then
        failed+=("lane ${LANES[$i]}")
    fi
done
LANE_PIDS=()

echo "== stage times (s; the lanes ran at the same time as pytest)"
while IFS=$'\t' read -r name took; do
    printf '%6s  %s\n' "$took" "$name"
done <"$STAGE_TIMES"
echo "== CI total ($((SECONDS - CI_STARTED)) s)"
rm -rf "$LANE_LOGS"
if [ "${#failed[@]}" != 0 ]; then
    echo "== CI failed: ${failed[*]}" >&2
    exit 1
fi
