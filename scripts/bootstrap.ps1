# Create .venv and install arena-ls with everything its demo and tests need (Windows, PowerShell).
# The CPU build of PyTorch is pinned and installed first: any other torch
# requirement would make pip download a multi-GB CUDA build (PyPI's Windows wheels are CPU builds).
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")
$python = if ($env:PYTHON) { $env:PYTHON } elseif (Get-Command py -ErrorAction SilentlyContinue) { "py" } else { "python" }
if (-not (Test-Path ".venv\Scripts\python.exe")) {
    & $python -m venv .venv
    if ($LASTEXITCODE -ne 0) { throw "could not create .venv with $python" }
}
$venvPython = ".venv\Scripts\python.exe"
& $venvPython -m pip install --quiet --upgrade pip
if ($LASTEXITCODE -ne 0) { throw "pip upgrade failed" }
& $venvPython -m pip install --quiet "torch==2.13.0" numpy
if ($LASTEXITCODE -ne 0) { throw "installing torch failed" }
& $venvPython -m pip install --quiet -e ".[test,plot,bench]"
if ($LASTEXITCODE -ne 0) { throw "installing arena-ls failed" }
