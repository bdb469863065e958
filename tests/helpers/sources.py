"""Python sources parsed once per test process.

The structure tests (``tests/unit/test_layers.py``, ``test_import_graph.py``,
``test_no_text_signals.py``, ``test_test_layout.py``) walk every module of ``arena_ls`` and of
``tests``, some of them once per rule; parsing the same unchanged file again cost most of their
time. A tree is kept while its file's size and modification time stay the same, so a test that
writes a file (a ``tmp_path`` fixture) or edits one between two reads gets the new text's tree.
Callers walk the tree and never change it.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """The tree of ``path``'s text (UTF-8), shared with every other caller while the file is unchanged."""
    stat = path.stat()
    return _parse(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _parse(path: str, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def nodes(path: Path) -> list[ast.AST]:
    """Every node of ``path``'s tree (``ast.walk``'s order), listed once while the file is unchanged."""
    stat = path.stat()
    return _nodes(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _nodes(path: str, mtime_ns: int, size: int) -> list[ast.AST]:
    return list(ast.walk(_parse(path, mtime_ns, size)))
