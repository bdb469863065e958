"""A bare pygls server that registers nothing: the startup benchmark's baseline.

    python benchmarks/bare_server.py

It answers ``initialize`` with pygls's defaults and nothing else, so the
difference to arena-ls is what arena-ls imports and does at start.
"""

from __future__ import annotations

from pygls.lsp.server import LanguageServer


def main() -> None:
    LanguageServer("bare", "0").start_io()


if __name__ == "__main__":
    main()
