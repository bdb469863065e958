#!/usr/bin/env bash
# The SOP's verification gates 1-11 (Training Arena SOP, "Verification gates"),
# run with curl against the AIDE daemon's routes (contract 7.4) on the
# reference job. Prints PASS/FAIL/SKIP per gate and exits non-zero if any gate
# fails. Gate 6 (GPU busy) is skipped where no NVIDIA GPU is present; gate 12
# (the reference trainer resumes after a forced kill) is run by the test suite.
#
#   editor-client/aide/verify-gates.sh [--workspace DIR] [--job tiny-lm] [--port PORT]
#       [--arena-ls CMD] [--settings JSON] [--url http://127.0.0.1:4777 [--token-file FILE]]
#
# Without --url it starts the demo daemon (demo/daemon.mjs) itself, on a free
# port (or --port) and in a throwaway copy of the clone's training/ (or
# --workspace), so a daemon you already run and your own runs are left alone;
# gate 11 kills that daemon mid-run and starts it again. With --url it checks
# a daemon already running there (its secret read from --token-file, default
# WORKSPACE/.aide/training/aide-token), and gate 11 is skipped.
set -uo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORKSPACE=""
JOB="tiny-lm"
PORT=0
URL=""
TOKEN_FILE=""
ARENA_LS=""
SETTINGS=""
CPU_SECONDS="${GATE_CPU_SECONDS:-5}"
WAIT="${GATE_WAIT_SECONDS:-120}"

while [ $# -gt 0 ]; do
    case "$1" in
        --workspace) WORKSPACE="$2"; shift 2 ;;
        --job) JOB="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --url) URL="$2"; shift 2 ;;
        --token-file) TOKEN_FILE="$2"; shift 2 ;;
        --arena-ls) ARENA_LS="$2"; shift 2 ;;
        --settings) SETTINGS="$2"; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "verify-gates: unknown argument $1" >&2; exit 2 ;;
    esac
done

TMP="$(mktemp -d)"
DAEMON_PID=""
FAILED=0
OWN_DAEMON=0
TOKEN=""
if [ -z "$URL" ]; then
    OWN_DAEMON=1
    TOKEN_FILE="$TMP/token"
    if [ -z "$WORKSPACE" ]; then
        # A throwaway workspace: the gates start, kill -9 and stop runs, never the person's own.
        WORKSPACE="$TMP/workspace"
        mkdir -p "$WORKSPACE" && cp -R "$REPO/training" "$WORKSPACE/training"
    fi
else
    [ -z "$WORKSPACE" ] && WORKSPACE="$REPO"
    [ -z "$TOKEN_FILE" ] && TOKEN_FILE="$WORKSPACE/.aide/training/aide-token"
fi

# The daemon's secret (docs/security.md, "The AIDE daemon"): every route but /health needs it.
read_token() {
    TOKEN="$(head -c 200 "$TOKEN_FILE" 2>/dev/null | tr -d '\r\n')"
    [ -n "$TOKEN" ] || { echo "verify-gates: no secret in $TOKEN_FILE (pass --token-file, the file the daemon names as its token file)" >&2; return 1; }
}
# curl with the secret in a header read from a file of ours, not on the command line (ps shows argv).
acurl() { curl -s -m "$WAIT" -H @"$TMP/headers" "$@"; }
write_headers() { umask 077; printf 'X-Arena-Token: %s\n' "$TOKEN" > "$TMP/headers"; }

cleanup() {
    [ -f "$TMP/headers" ] && acurl -X POST -H 'Content-Type: application/json' -d '{"confirm": true}' "$URL/api/training/stop" >/dev/null 2>&1
    if [ -n "$DAEMON_PID" ]; then
        kill "$DAEMON_PID" 2>/dev/null
        wait "$DAEMON_PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup EXIT

jget() { node "$HERE/lib/json-get.mjs" "$1"; }
pass() { printf 'PASS gate %-2s %s\n' "$1" "$2"; }
fail() { printf 'FAIL gate %-2s %s\n' "$1" "$2"; FAILED=1; }
skip() { printf 'SKIP gate %-2s %s\n' "$1" "$2"; }

# get PATH -> body in $TMP/body, status code in $CODE
get() { CODE=$(acurl -o "$TMP/body" -w '%{http_code}' "$URL$1"); }
# post PATH JSON
post() { CODE=$(acurl -o "$TMP/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d "$2" "$URL$1"); }
field() { jget "$1" < "$TMP/body"; }

# start_daemon: the demo daemon on $PORT (0: a free one; its address is read from what it prints).
start_daemon() {
    local args=(--workspace "$WORKSPACE" --port "$PORT" --token-file "$TOKEN_FILE")
    [ -n "$ARENA_LS" ] && args+=(--arena-ls "$ARENA_LS")
    [ -n "$SETTINGS" ] && args+=(--settings "$SETTINGS")
    : > "$TMP/daemon.out"
    node "$HERE/demo/daemon.mjs" "${args[@]}" --ui-port 0 >"$TMP/daemon.out" 2>>"$TMP/daemon.err" &
    DAEMON_PID=$!
    local waited=0
    until grep -q "listening on http://127.0.0.1:[0-9]" "$TMP/daemon.out" 2>/dev/null; do
        if ! kill -0 "$DAEMON_PID" 2>/dev/null || [ "$waited" -ge $((WAIT * 10)) ]; then
            echo "verify-gates: the daemon did not start:" >&2
            tail -20 "$TMP/daemon.err" >&2
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    URL="$(grep -o 'http://127.0.0.1:[0-9]*' "$TMP/daemon.out" | head -1)"
    PORT="${URL##*:}"
    read_token && write_headers
}

# wait_for DESCRIPTION COMMAND...: retries the command every 0.5 s until it succeeds or WAIT passes.
wait_for() {
    local what="$1"; shift
    local deadline=$(( $(date +%s) + WAIT ))
    until "$@"; do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "  (timed out waiting for $what)"
            return 1
        fi
        sleep 0.5
    done
}

active_is() { get /api/training/status; [ "$(field active.status)" = "$1" ]; }
active_none() { get /api/training/status; [ "$(field active)" = "null" ]; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || ps -o cputime= -p "$1" 2>/dev/null | awk -F: '{print ($1 * 3600 + $2 * 60 + $3) * 100}'; }
stop_run() { post /api/training/stop '{"confirm": true}'; }
stopped_now() { stop_run; active_none; }
log_past() { get /api/training/status; local seq; seq=$(field 'logs[-1].seq'); [ "$seq" != null ] && [ "$seq" -ge "$1" ]; }
first_step_seen() { get /api/training/status; [ "$(field active.step)" != "null" ]; }

if [ "$OWN_DAEMON" = 1 ]; then
    start_daemon || { fail 1 "the demo daemon did not start"; exit 1; }
    echo "verify-gates: a daemon of its own on $URL, workspace $WORKSPACE"
else
    read_token || { fail 1 "no secret to call $URL with"; exit 1; }
    write_headers
fi

# 1. daemon up
get /health
if [ "$CODE" = 200 ] && [ "$(field ok)" = true ]; then
    pass 1 "daemon up: arena-ls $(field arena.version), workspace $(field arena.workspace)"
else
    fail 1 "GET /health answered $CODE: $(head -c 300 "$TMP/body")"
    exit 1
fi

# 2. idle baseline
get /api/training/status
JOBS=$(field jobs.length)
if [ "$CODE" = 200 ] && [ "$(field active)" = null ] && grep -q "\"id\":\"$JOB\"" "$TMP/body"; then
    pass 2 "idle baseline: active null, $JOBS jobs (including $JOB)"
else
    fail 2 "status answered $CODE, active $(field active), jobs $JOBS (need $JOB idle)"
fi

# 3. start
post /api/training/start "{\"id\":\"$JOB\",\"approved\":true}"
PID=$(field pid)
RUN=$(field runId)
if [ "$CODE" = 200 ] && [ "$(field status)" = running ] && [ "$(field id)" = "$JOB" ] && [ "$PID" != null ]; then
    pass 3 "start: {\"id\":\"$JOB\",\"status\":\"running\",\"pid\":$PID,\"runId\":\"$RUN\"}"
else
    fail 3 "start answered $CODE: $(head -c 300 "$TMP/body")"
    exit 1
fi

# 4. observed liveness: the last log line advances between two polls >= 2 s apart
wait_for "the first step" first_step_seen
get /api/training/status
SEQ1=$(field 'logs[-1].seq'); STEP1=$(field active.step)
sleep 2
get /api/training/status
SEQ2=$(field 'logs[-1].seq'); STEP2=$(field active.step)
if [ "$SEQ1" != null ] && [ "$SEQ2" != null ] && [ "$SEQ2" -gt "$SEQ1" ]; then
    pass 4 "liveness: last log line seq $SEQ1 -> $SEQ2 over 2 s (step $STEP1 -> $STEP2)"
else
    fail 4 "the last log line did not advance (seq $SEQ1 -> $SEQ2)"
fi

# 5. process alive and its CPU time grows
CPU1=$(cpu_ticks "$PID")
sleep "$CPU_SECONDS"
CPU2=$(cpu_ticks "$PID")
if kill -0 "$PID" 2>/dev/null && [ -n "$CPU1" ] && [ -n "$CPU2" ] && [ "$CPU2" -gt "$CPU1" ]; then
    pass 5 "process $PID alive, CPU ticks $CPU1 -> $CPU2 over ${CPU_SECONDS} s"
else
    fail 5 "process $PID: alive? $(kill -0 "$PID" 2>/dev/null && echo yes || echo no), CPU ticks $CPU1 -> $CPU2"
fi

# 6. GPU busy
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    GPU=$(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | head -1)
    APPS=$(nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader)
    if echo "$APPS" | grep -q "^$PID,"; then
        pass 6 "GPU busy: utilization,memory.used = $GPU; the trainer $PID holds GPU memory"
    else
        fail 6 "GPU at $GPU but the trainer $PID holds no GPU memory (compute apps: ${APPS:-none})"
    fi
else
    skip 6 "no NVIDIA GPU here (nvidia-smi missing or no device): the trainer runs on the CPU"
fi

# 7. stop (checkpoint-first, SOP rule 4: the cooperative stop is sent once the run has a checkpoint)
checkpoint_seen() { get /api/training/status; [ "$(field active.lastCheckpoint)" != null ]; }
wait_for "the run's first checkpoint" checkpoint_seen
post /api/training/stop '{}'
[ "$CODE" = 409 ] && echo "  (stop refused: $(field error))"
STOP_STATUS=$(field status); TAIL_LAST=$(field 'tail[-1]'); CKPT=$(field lastCheckpoint.step); LOST=$(field lost)
get /api/training/status
if [ "$STOP_STATUS" = stopped ] && [ "$(field active)" = null ] && echo "$TAIL_LAST" | grep -q "stopped"; then
    pass 7 "stop: {\"status\":\"stopped\"}, active null, tail ends \"$TAIL_LAST\" (checkpoint step $CKPT, lost $LOST)"
else
    fail 7 "stop answered status $STOP_STATUS, tail ends \"$TAIL_LAST\"; active now $(field active)"
fi

# 8. process confirmed dead
if kill -0 "$PID" 2>/dev/null; then
    fail 8 "process $PID is still alive after the stop"
else
    pass 8 "process $PID confirmed dead (kill -0 $PID: no such process)"
fi

# 9. negative paths
NEG=""
post /api/training/start "{\"id\":\"$JOB\"}"
[ "$CODE" = 400 ] && [ "$(field error)" = "explicit training approval required" ] || NEG="$NEG; without approved: $CODE $(field error)"
post /api/training/start '{"id":"no-such-job-here","approved":true}'
[ "$CODE" = 404 ] && [ "$(field error)" = "training job is not allowlisted" ] || NEG="$NEG; unknown id: $CODE $(field error)"
post /api/training/start "{\"id\":\"$JOB\",\"approved\":true}"
if [ "$CODE" = 200 ]; then
    post /api/training/start "{\"id\":\"$JOB\",\"approved\":true}"
    [ "$CODE" = 409 ] && [ "$(field error)" = "another Training Room job is already running" ] || NEG="$NEG; twice: $CODE $(field error)"
    stop_run
else
    NEG="$NEG; the first start for the twice-check answered $CODE $(field error)"
fi
if [ -z "$NEG" ]; then
    pass 9 "negative paths: 400 explicit training approval required; 409 another Training Room job is already running; 404 training job is not allowlisted"
else
    fail 9 "negative paths${NEG}"
fi

# 10. crash path: the trainer killed by force -> TRAINING_CRASHED with its exit code, status crashed (or the watchdog relaunching it)
post /api/training/start "{\"id\":\"$JOB\",\"approved\":true}"
PID=$(field pid); RUN=$(field runId)
if [ "$CODE" = 200 ] && wait_for "the first step" first_step_seen; then
    kill -9 "$PID"
    crash_seen() {
        get "/api/training/logs?format=json&runId=$RUN&since=-1&limit=5000"
        grep -q "TRAINING_CRASHED: $JOB code" "$TMP/body"
    }
    if wait_for "TRAINING_CRASHED" crash_seen; then
        LINE=$(grep -o "TRAINING_CRASHED: $JOB code [^\"]*" "$TMP/body" | head -1)
        get /api/training/status
        STATE="$(field active.status)"
        [ "$STATE" = null ] && STATE="$(field lastRun.status) (exit code $(field lastRun.exitCode))"
        case "$STATE" in
            crashed*|restarting|starting|running) pass 10 "crash: \"$LINE\"; status $STATE$( [ "$STATE" = restarting ] || [ "$STATE" = running ] && echo ' (the watchdog relaunches it from its checkpoint)')" ;;
            *) fail 10 "after \"$LINE\" the status is $STATE" ;;
        esac
    else
        fail 10 "no TRAINING_CRASHED line after kill -9 $PID"
    fi
    wait_for "the run to stop" stopped_now
else
    fail 10 "the start for the crash check answered $CODE $(field error)"
fi

# 11. resilience: kill the daemon mid-job, start it again -> the run is re-adopted with its log tail
if [ "$OWN_DAEMON" = 1 ]; then
    post /api/training/start "{\"id\":\"$JOB\",\"approved\":true}"
    PID=$(field pid); RUN=$(field runId)
    if [ "$CODE" = 200 ] && wait_for "ten log lines" log_past 10; then
        get /api/training/status; SEQ_BEFORE=$(field 'logs[-1].seq')
        kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null
        DAEMON_PID=""
        if ! kill -0 "$PID" 2>/dev/null; then
            fail 11 "the trainer $PID died with the daemon"
        else
            start_daemon
            wait_for "the log to advance after the restart" log_past $((SEQ_BEFORE + 1))
            get /api/training/status
            if [ "$(field active.runId)" = "$RUN" ] && [ "$(field active.pid)" = "$PID" ] && [ "$(field 'logs[-1].seq')" != null ] && [ "$(field 'logs[-1].seq')" -gt "$SEQ_BEFORE" ]; then
                pass 11 "resilience: daemon killed (-9) and restarted; run $RUN (pid $PID) re-adopted; its log went on from seq $SEQ_BEFORE to $(field 'logs[-1].seq') ($(field logs.length) lines in status), last \"$(field 'logs[-1].line' | head -c 80)\""
            else
                fail 11 "after the restart: active $(field active.runId) pid $(field active.pid), last seq $(field 'logs[-1].seq') (before: $RUN pid $PID seq $SEQ_BEFORE)"
            fi
        fi
        stop_run
    else
        fail 11 "the start for the resilience check answered $CODE $(field error)"
    fi
else
    skip 11 "--url names a daemon this script did not start, so it cannot kill and restart it"
fi

skip 12 "the reference trainer's resume after a forced kill is run by the test suite: tests/trainer/test_reference_trainer.py::test_resume_after_sigkill_continues_the_same_loss_curve"
[ "$FAILED" = 0 ] && echo "verify-gates: all gates passed" || echo "verify-gates: some gates FAILED"
exit "$FAILED"
