# Sourced by the other scripts: VENV_BIN is .venv's folder of executables,
# bin on POSIX, Scripts on Windows (Git Bash, MSYS2). PYTHON names the
# interpreter that creates .venv (python3, else python, e.g. on Windows).
if [ -d .venv/Scripts ] || [ "${OS:-}" = "Windows_NT" ]; then
    VENV_BIN=.venv/Scripts
else
    VENV_BIN=.venv/bin
fi
if [ -z "${PYTHON:-}" ]; then
    if command -v python3 >/dev/null 2>&1; then PYTHON=python3; else PYTHON=python; fi
fi
