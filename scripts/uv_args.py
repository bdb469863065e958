"""The arguments that make ``uv pip install`` install what ``pip install`` would, from pip's own
configuration; used by scripts/bootstrap.sh.

uv installs the same packages as pip from the same places in a fraction of the time (CI's
bootstrap: 55 s of pip, 7 s of uv), but it reads none of pip's configuration: the files
(``pip config list``) and the ``PIP_*`` variables, which on many machines say where the packages
are (a local index, a folder of wheels such as the pinned CPU build of PyTorch, a constraints
file, a certificate). This prints one uv argument per line, and ``KEY=VALUE`` lines for the
environment, translated from that configuration; it exits with status 3, printing the option it
cannot translate, when pip is configured with anything else, and bootstrap then installs with pip
as before: a package from somewhere other than where pip would take it is never the price.

pip's own precedence is kept: a ``PIP_*`` variable over the ``install`` section over ``global``
(``pip config list`` has already merged the files in pip's order). Indexes are searched as pip
searches them, every index for every package and the best version wins (uv's
``unsafe-best-match``; uv's default stops at the first index that has the package).
"""

from __future__ import annotations

import ast
import subprocess
import sys

UNTRANSLATABLE = 3
PYPI = "https://pypi.org/simple"
IGNORED = {
    # pip's own behaviour, which uv's install does not have or does not need
    "disable-pip-version-check",
    "no-color",
    "progress-bar",
    "quiet",
    "verbose",
    "no-input",
    "no-warn-script-location",
    "root-user-action",
    "no-compile",
    "compile",
    "config-file",  # where pip read the rest: read already
}


def pip_config() -> dict[str, str]:
    """pip's effective options for ``pip install``: ``{option: value}``."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    return merged_options(listed)


def merged_options(listed: str) -> dict[str, str]:
    """``pip config list``'s lines (``section.option='value'``) as the options ``pip install``
    uses: a ``PIP_*`` variable (``:env:``) over ``install`` over ``global``."""
    by_section: dict[str, dict[str, str]] = {}
    for line in listed.splitlines():
        name, _, quoted = line.partition("=")
        section, _, option = name.rpartition(".")
        if not option or not quoted:
            continue
        by_section.setdefault(section, {})[option] = str(ast.literal_eval(quoted))
    merged: dict[str, str] = {}
    for section in ("global", "install", ":env:"):
        merged.update(by_section.get(section, {}))
    return merged


def uv_arguments(options: dict[str, str]) -> list[str]:
    """The uv arguments (and ``KEY=VALUE`` environment lines) for pip's ``options``.

    Raises ``ValueError`` naming the first option uv cannot be told."""
    arguments = ["--index-strategy", "unsafe-best-match"]
    environment: list[str] = []
    for option, value in sorted(options.items()):
        words = value.split()
        if option in IGNORED:
            continue
        if option == "index-url":
            arguments += ["--index-url", value]
        elif option == "extra-index-url":
            for url in words:
                arguments += ["--extra-index-url", url]
        elif option == "find-links":
            for location in words:
                arguments += ["--find-links", location]
        elif option == "constraint":
            for path in words:
                arguments += ["--constraint", path]
        elif option == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                arguments.append("--no-index")
        elif option == "trusted-host":
            for host in words:
                arguments += ["--allow-insecure-host", host]
        elif option == "cert":
            environment.append(f"SSL_CERT_FILE={value}")
        elif option == "timeout" or option == "default-timeout":
            environment.append(f"UV_HTTP_TIMEOUT={value}")
        elif option == "proxy":
            environment += [f"HTTPS_PROXY={value}", f"HTTP_PROXY={value}"]
        else:
            raise ValueError(option)
    if "--index-url" not in arguments and "--no-index" not in arguments:
        arguments += ["--index-url", PYPI]
    return environment + arguments


def main() -> int:
    try:
        lines = uv_arguments(pip_config())
    except ValueError as error:
        print(f"pip's option {error} has no uv equivalent here", file=sys.stderr)
        return UNTRANSLATABLE
    except (OSError, subprocess.CalledProcessError, SyntaxError) as error:
        print(f"pip's configuration could not be read: {error}", file=sys.stderr)
        return UNTRANSLATABLE
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
