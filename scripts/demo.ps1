# Install arena-ls and run the demo (Windows, PowerShell): the bundled `tiny-lm`
# job through the language server, followed to the end with a live progress bar.
$ErrorActionPreference = "Stop"
$demoArgs = $args
Set-Location (Join-Path $PSScriptRoot "..")
& (Join-Path $PSScriptRoot "bootstrap.ps1")
& ".venv\Scripts\arena.exe" demo @demoArgs
exit $LASTEXITCODE
