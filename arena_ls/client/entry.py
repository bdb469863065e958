"""The ``arena`` command's entry point: ``arena check`` without loading the client.

``arena check`` is a local lint that people run on every save and commit, so
its start-up counts: it is dispatched here before the terminal client (its
LSP client, ``rich``, asyncio) is imported. Every other command, and any
``check`` call the quick parser does not understand (``--help``, a usage
error), goes to ``arena_ls.client.cli.main``.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if "check" in arguments and "-h" not in arguments and "--help" not in arguments:
        from arena_ls.client.lint import fast_main

        code = fast_main(arguments)
        if code is not None:
            return code
    from arena_ls.client.cli import main as full_main

    return full_main(arguments)


if __name__ == "__main__":
    sys.exit(main())
