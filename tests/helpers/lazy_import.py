"""A module imported when a test first uses it, not when the test module is collected.

``torch = LazyModule("torch")`` at the top of a test module reads like the import it replaces:
``torch.load(...)`` imports PyTorch then (or skips the test, as ``pytest.importorskip`` did for
the whole module, when it is not installed). Collection, which every ``pytest -n`` worker does for
every module, the fast lane's included, no longer pays seconds for a framework it may never use
(``tests/unit/test_test_layout.py`` holds the rule).
"""

from __future__ import annotations

from typing import Any

import pytest


class LazyModule:
    """Stands for the module ``name`` until an attribute is asked for."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):  # pytest's collection looks for its own markers on every name
            raise AttributeError(attribute)
        return getattr(pytest.importorskip(self._name), attribute)
