"""Load a module from its file: a script (``scripts/``) or a benchmark, which are not packages
the tests may import by name (``tests/unit/test_test_layout.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(name: str, path: Path) -> ModuleType:
    """The module of ``path``, executed once per call and registered as ``sys.modules[name]`` (a
    dataclass, or a pickled object, looks its module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path} cannot be loaded as a module"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
