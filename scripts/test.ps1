# Install everything the tests need and run them (Windows, PowerShell): lint, formatting,
# types for both platform branches, the rules-doc check, the VS Code
# extension's checks where npm is present, and the pytest suite (tests that need
# POSIX are skipped with their reason; the Windows-only ones in tests/windows run;
# test_quick_bench.py runs the benchmarks in quick mode, once). The same steps as scripts/test.sh.
$ErrorActionPreference = "Stop"
$pytestArgs = $args
Set-Location (Join-Path $PSScriptRoot "..")
& (Join-Path $PSScriptRoot "bootstrap.ps1")
$bin = ".venv\Scripts"

function Step([string]$name, [scriptblock]$command) {
    Write-Host "== $name"
    & $command
    if ($LASTEXITCODE -ne 0) { throw "$name failed (exit $LASTEXITCODE)" }
}

Step "ruff" { & "$bin\ruff.exe" check arena_ls tests benchmarks }
Step "ruff format --check" { & "$bin\ruff.exe" format --check arena_ls tests benchmarks }
Step "mypy (strict)" { & "$bin\mypy.exe" arena_ls }
Step "mypy --platform linux" { & "$bin\mypy.exe" --platform linux arena_ls }
Step "mypy --platform win32" { & "$bin\mypy.exe" --platform win32 arena_ls }
Step "rules doc up to date" { & "$bin\python.exe" -m arena_ls.gates.docs --check }
if ((Test-Path "editor-client\vscode\package.json") -and (Get-Command npm -ErrorAction SilentlyContinue)) {
    Push-Location "editor-client\vscode"
    try {
        Step "VS Code extension: npm ci" { npm ci }
        Step "VS Code extension: tsc, eslint, node tests" { npm test }
    } finally { Pop-Location }
}
# tests\benchmarks\test_quick_bench.py is the one run of the quick benchmarks; its figures are shown after.
$quickBench = Join-Path (Get-Location) "benchmarks\results-quick.json"
Remove-Item $quickBench -ErrorAction SilentlyContinue
$env:ARENA_QUICK_BENCH_RESULTS = $quickBench
Step "pytest" { & "$bin\python.exe" -m pytest -p no:cacheprovider @pytestArgs }
if (Test-Path $quickBench) {
    Step "benchmarks (quick mode, run by pytest)" { & "$bin\python.exe" -m benchmarks --show $quickBench }
}
