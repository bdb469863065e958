<#
.SYNOPSIS
The SOP's verification gates 1-11 (Training Arena SOP, "Verification gates"), with
the SOP's own Invoke-RestMethod lines, against the AIDE daemon's routes (contract 7.4)
on the reference job. Prints PASS/FAIL/SKIP per gate; exits 1 if any gate fails.

.DESCRIPTION
Gate 6 (GPU busy) is skipped where no NVIDIA GPU is present; gate 12 (the reference
trainer resumes after a forced kill) is run by the test suite. Without -Url the script
starts the demo daemon itself (demo\daemon.mjs), on a free port (or -Port) and in a
throwaway copy of the clone's training\ (or -Workspace), so a daemon you already run
and your own runs are left alone; gate 11 kills it mid-run and starts it again. With
-Url it checks a daemon already running (its secret read from -TokenFile, default
WORKSPACE\.aide\training\aide-token), and gate 11 is skipped.

.EXAMPLE
powershell -ExecutionPolicy Bypass -File editor-client\aide\verify-gates.ps1 -Workspace E:\aide-sovereign-workbench -Job tiny-lm
#>
param(
    [string]$Workspace = "",
    [string]$Job = "tiny-lm",
    [int]$Port = 0,
    [string]$Url = "",
    [string]$TokenFile = "",
    [string]$ArenaLs = "",
    [string]$Settings = "",
    [int]$CpuSeconds = 20,
    [int]$WaitSeconds = 120
)
$ErrorActionPreference = "Stop"
# Script-scoped, so Use-Token below can add the secret's header to every Invoke-RestMethod here.
$PSDefaultParameterValues = @{}
$script:Failed = $false
$OwnDaemon = [string]::IsNullOrEmpty($Url)
$Daemon = $null
$Tmp = Join-Path ([System.IO.Path]::GetTempPath()) ("aide-gates-" + [guid]::NewGuid())
New-Item -ItemType Directory -Path $Tmp | Out-Null
$Repo = (Resolve-Path (Join-Path $PSScriptRoot "..\..")).Path
if ($OwnDaemon) {
    $TokenFile = Join-Path $Tmp "token"
    if (-not $Workspace) {
        # A throwaway workspace: the gates start, kill and stop runs, never the person's own.
        $Workspace = Join-Path $Tmp "workspace"
        New-Item -ItemType Directory -Path $Workspace | Out-Null
        Copy-Item -Recurse (Join-Path $Repo "training") (Join-Path $Workspace "training")
    }
} else {
    if (-not $Workspace) { $Workspace = $Repo }
    if (-not $TokenFile) { $TokenFile = Join-Path $Workspace ".aide\training\aide-token" }
}

# The daemon's secret (docs/security.md, "The AIDE daemon"): every route but /health needs it, so every
# Invoke-RestMethod of this script sends it; the SOP's lines stay as they are.
function Use-Token {
    $token = (Get-Content -Raw $TokenFile -ErrorAction Stop).Trim()
    $script:PSDefaultParameterValues["Invoke-RestMethod:Headers"] = @{ "X-Arena-Token" = $token }
}

function Pass($gate, $text) { Write-Output ("PASS gate {0,-2} {1}" -f $gate, $text) }
function Fail($gate, $text) { Write-Output ("FAIL gate {0,-2} {1}" -f $gate, $text); $script:Failed = $true }
function Skip($gate, $text) { Write-Output ("SKIP gate {0,-2} {1}" -f $gate, $text) }

# A POST that returns the refusal's status and body instead of throwing (PowerShell 5.1 and 7).
function Post-Json($path, $body) {
    try {
        $answer = Invoke-RestMethod -Method Post -ContentType 'application/json' -Body $body -TimeoutSec $WaitSeconds "$Url$path"
        return @{ Code = 200; Body = $answer }
    } catch {
        $code = 0
        if ($_.Exception.Response) { $code = [int]$_.Exception.Response.StatusCode }
        $parsed = $null
        if ($_.ErrorDetails -and $_.ErrorDetails.Message) { try { $parsed = $_.ErrorDetails.Message | ConvertFrom-Json } catch { } }
        return @{ Code = $code; Body = $parsed }
    }
}
function Status() { Invoke-RestMethod -TimeoutSec $WaitSeconds "$Url/api/training/status" }
function Wait-Until($what, [scriptblock]$check) {
    $deadline = (Get-Date).AddSeconds($WaitSeconds)
    while ((Get-Date) -lt $deadline) {
        try { if (& $check) { return $true } } catch { }
        Start-Sleep -Milliseconds 500
    }
    Write-Output "  (timed out waiting for $what)"
    return $false
}
function Last-Seq($status) { if ($status.logs.Count -gt 0) { return [int64]$status.logs[-1].seq } else { return -1 } }

function Start-Daemon {
    $arguments = @((Join-Path $PSScriptRoot "demo\daemon.mjs"), "--workspace", $Workspace, "--port", "$Port", "--ui-port", "0", "--token-file", $TokenFile)
    if ($ArenaLs) { $arguments += @("--arena-ls", $ArenaLs) }
    if ($Settings) { $arguments += @("--settings", $Settings) }
    $out = Join-Path $Tmp "daemon.out"
    Remove-Item $out -ErrorAction SilentlyContinue
    $script:Daemon = Start-Process -FilePath "node" -ArgumentList ($arguments | ForEach-Object { '"' + ($_ -replace '"', '\"') + '"' }) `
        -RedirectStandardOutput $out -RedirectStandardError (Join-Path $Tmp "daemon.err") -PassThru -NoNewWindow
    $ready = Wait-Until "the daemon" { (Test-Path $out) -and ((Get-Content $out -Raw) -match "listening on (http://127\.0\.0\.1:(\d+))") }
    if (-not $ready) { Get-Content (Join-Path $Tmp "daemon.err") -Tail 20 | Write-Output; return $false }
    # Port 0 is a free port: the daemon says which; a restart (gate 11) takes the same one.
    $null = (Get-Content $out -Raw) -match "listening on (http://127\.0\.0\.1:(\d+))"
    $script:Url = $Matches[1]
    $script:Port = [int]$Matches[2]
    Use-Token
    return $true
}

try {
    if ($OwnDaemon) {
        if (-not (Start-Daemon)) { Fail 1 "the demo daemon did not start"; exit 1 }
        Write-Output "verify-gates: a daemon of its own on $Url, workspace $Workspace"
    } else { Use-Token }

    # 1. daemon up
    $health = Invoke-RestMethod $Url/health
    if ($health.ok) { Pass 1 "daemon up: arena-ls $($health.arena.version), workspace $($health.arena.workspace)" } else { Fail 1 "health: $($health | ConvertTo-Json -Compress)"; exit 1 }

    # 2. idle baseline
    $status = Invoke-RestMethod $Url/api/training/status   # active:null, jobs: N
    if ($null -eq $status.active -and ($status.jobs | Where-Object { $_.id -eq $Job })) { Pass 2 "idle baseline: active null, $($status.jobs.Count) jobs (including $Job)" } else { Fail 2 "active $($status.active.id), jobs $($status.jobs.Count)" }

    # 3. start
    $started = Invoke-RestMethod -Method Post -ContentType 'application/json' -Body "{`"id`":`"$Job`",`"approved`":true}" $Url/api/training/start
    $procId = $started.pid
    if ($started.status -eq "running" -and $procId) { Pass 3 "start: $($started | ConvertTo-Json -Compress)" } else { Fail 3 "start: $($started | ConvertTo-Json -Compress)"; exit 1 }

    # 4. observed liveness: poll status twice >= 2 s apart -> the last log line ADVANCES
    Wait-Until "the first step" { $null -ne (Status).active.step } | Out-Null
    $first = Status; Start-Sleep -Seconds 2; $second = Status
    if ((Last-Seq $second) -gt (Last-Seq $first)) { Pass 4 "liveness: last log line seq $(Last-Seq $first) -> $(Last-Seq $second) (step $($first.active.step) -> $($second.active.step))" } else { Fail 4 "the last log line did not advance" }

    # 5. process alive + CPU grows
    $cpu1 = (Get-Process -Id $procId).CPU; Start-Sleep -Seconds $CpuSeconds; $cpu2 = (Get-Process -Id $procId).CPU
    if ($cpu2 -gt $cpu1) { Pass 5 "process $procId alive, CPU $cpu1 s -> $cpu2 s over $CpuSeconds s" } else { Fail 5 "process $procId CPU $cpu1 -> $cpu2" }

    # 6. GPU busy
    if (Get-Command nvidia-smi -ErrorAction SilentlyContinue) {
        $gpu = nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits | Select-Object -First 1
        $apps = nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader
        if ($apps | Where-Object { $_ -match "^$procId," }) { Pass 6 "GPU busy: $gpu; the trainer $procId holds GPU memory" } else { Fail 6 "GPU at $gpu but the trainer $procId holds no GPU memory ($apps)" }
    } else {
        Skip 6 "no NVIDIA GPU here (nvidia-smi not found): the trainer runs on the CPU"
    }

    # 7. stop (checkpoint-first, SOP rule 4: the cooperative stop is sent once the run has a checkpoint)
    Wait-Until "the run's first checkpoint" { $null -ne (Status).active.lastCheckpoint } | Out-Null
    $stopped = Invoke-RestMethod -Method Post -ContentType 'application/json' -Body '{}' $Url/api/training/stop
    $after = Status
    if ($stopped.status -eq "stopped" -and $null -eq $after.active -and $stopped.tail[-1] -match "stopped") {
        Pass 7 "stop: status stopped, active null, tail ends `"$($stopped.tail[-1])`" (checkpoint step $($stopped.lastCheckpoint.step), lost $($stopped.lost | ConvertTo-Json -Compress))"
    } else { Fail 7 "stop: $($stopped | ConvertTo-Json -Compress -Depth 3)" }

    # 8. process CONFIRMED dead
    if (Get-Process -Id $procId -ErrorAction SilentlyContinue) { Fail 8 "process $procId is still alive" } else { Pass 8 "process $procId confirmed dead (Get-Process -Id $procId: not found)" }

    # 9. negative paths
    $problems = @()
    $r = Post-Json "/api/training/start" "{`"id`":`"$Job`"}"
    if ($r.Code -ne 400 -or $r.Body.error -ne "explicit training approval required") { $problems += "without approved: $($r.Code) $($r.Body.error)" }
    $r = Post-Json "/api/training/start" '{"id":"no-such-job-here","approved":true}'
    if ($r.Code -ne 404 -or $r.Body.error -ne "training job is not allowlisted") { $problems += "unknown id: $($r.Code) $($r.Body.error)" }
    $r = Post-Json "/api/training/start" "{`"id`":`"$Job`",`"approved`":true}"
    if ($r.Code -eq 200) {
        $r = Post-Json "/api/training/start" "{`"id`":`"$Job`",`"approved`":true}"
        if ($r.Code -ne 409 -or $r.Body.error -ne "another Training Room job is already running") { $problems += "twice: $($r.Code) $($r.Body.error)" }
        Post-Json "/api/training/stop" '{"confirm": true}' | Out-Null
    } else { $problems += "first start: $($r.Code) $($r.Body.error)" }
    if ($problems.Count -eq 0) { Pass 9 "negative paths: approval required (400), already running (409), not allowlisted (404)" } else { Fail 9 ($problems -join "; ") }

    # 10. crash path: Stop-Process -Force on the child -> status reports crashed + exit code
    $r = Post-Json "/api/training/start" "{`"id`":`"$Job`",`"approved`":true}"
    if ($r.Code -eq 200 -and (Wait-Until "the first step" { $null -ne (Status).active.step })) {
        $runId = $r.Body.runId
        Stop-Process -Id $r.Body.pid -Force
        $seen = Wait-Until "TRAINING_CRASHED" { (Invoke-RestMethod "$Url/api/training/logs?format=json&runId=$runId&since=-1&limit=5000").lines | Where-Object { $_.line -match "TRAINING_CRASHED: $Job code" } }
        $now = Status
        $state = if ($now.active) { $now.active.status } else { "$($now.lastRun.status) (exit code $($now.lastRun.exitCode))" }
        if ($seen -and $state -match "^(crashed|restarting|starting|running)") { Pass 10 "crash: TRAINING_CRASHED logged; status $state" } else { Fail 10 "after Stop-Process -Force: status $state" }
        Wait-Until "the run to stop" { Post-Json "/api/training/stop" '{"confirm": true}' | Out-Null; $null -eq (Status).active } | Out-Null
    } else { Fail 10 "the start for the crash check answered $($r.Code)" }

    # 11. resilience: kill the daemon mid-job, restart -> the orphan is re-adopted with its log tail
    if ($OwnDaemon) {
        $r = Post-Json "/api/training/start" "{`"id`":`"$Job`",`"approved`":true}"
        if ($r.Code -eq 200 -and (Wait-Until "ten log lines" { (Last-Seq (Status)) -ge 10 })) {
            $before = Last-Seq (Status)
            Stop-Process -Id $script:Daemon.Id -Force
            $script:Daemon.WaitForExit()
            if (-not (Get-Process -Id $r.Body.pid -ErrorAction SilentlyContinue)) { Fail 11 "the trainer died with the daemon" }
            elseif (Start-Daemon) {
                Wait-Until "the log to advance" { (Last-Seq (Status)) -gt $before } | Out-Null
                $now = Status
                if ($now.active.runId -eq $r.Body.runId -and $now.active.pid -eq $r.Body.pid -and (Last-Seq $now) -gt $before) {
                    Pass 11 "resilience: daemon killed and restarted; run $($r.Body.runId) re-adopted, log seq $before -> $(Last-Seq $now)"
                } else { Fail 11 "after the restart: active $($now.active.runId) pid $($now.active.pid)" }
            } else { Fail 11 "the daemon did not start again" }
            Post-Json "/api/training/stop" '{"confirm": true}' | Out-Null
        } else { Fail 11 "the start for the resilience check answered $($r.Code)" }
    } else {
        Skip 11 "-Url names a daemon this script did not start, so it cannot kill and restart it"
    }

    Skip 12 "the reference trainer's resume after a forced kill is run by the test suite: tests/trainer/test_reference_trainer.py::test_resume_after_sigkill_continues_the_same_loss_curve"
} finally {
    try { Post-Json "/api/training/stop" '{"confirm": true}' | Out-Null } catch { }
    if ($script:Daemon -and -not $script:Daemon.HasExited) { Stop-Process -Id $script:Daemon.Id -Force }
    Remove-Item -Recurse -Force $Tmp -ErrorAction SilentlyContinue
}
if ($script:Failed) { Write-Output "verify-gates: some gates FAILED"; exit 1 }
Write-Output "verify-gates: all gates passed"
