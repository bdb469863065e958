"""Import what the suite's first processes import, so that Python writes its bytecode once.

Where Python keeps bytecode itself (``PYTHONDONTWRITEBYTECODE`` unset: CI's ``scripts/test.sh``),
bootstrap runs this twice at once, each on a core:

- ``python scripts/bytecode_ahead.py trainer``: PyTorch with what a trainer's first optimizer loads
  (``torch._dynamo``, through ``torch.optim``), the largest share: the tests' first trainers start
  together, and each would otherwise compile it for itself;
- ``python scripts/bytecode_ahead.py arena-ls``: SymPy and numpy (which PyTorch's half then finds
  compiled), then every module of arena-ls, and so every dependency it imports, lazily or not (a
  server must never compile a module on its event loop).

Importing compiles exactly what is used: some 2,300 modules, against the 6,100 that compiling the
packages whole took (PyTorch, SymPy, NetworkX, Pygments, ...: docs/performance.md). The rest
(transformers, Ray, ...) is compiled by the first process that imports it. A module that cannot
be imported here (another system's) is skipped: what it would have compiled is compiled later.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

TRAINER = ("torch", "torch._dynamo", "torch.optim")
FIRST_OF_THE_REST = ("sympy", "numpy")


def import_quietly(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # another platform's module, a missing optional dependency: compiled later
        return False
    return True


def arena_ls_modules() -> list[str]:
    """Every module of arena-ls but its entry points' ``__main__`` (which would run)."""
    import arena_ls

    return [
        info.name
        for info in pkgutil.walk_packages(arena_ls.__path__, "arena_ls.")
        if not info.name.endswith("__main__")
    ]


def main(argv: list[str]) -> int:
    if argv == ["trainer"]:
        names = list(TRAINER)
    elif argv == ["arena-ls"]:
        names = [*FIRST_OF_THE_REST, *arena_ls_modules()]
    else:
        print("usage: python scripts/bytecode_ahead.py trainer | arena-ls", file=sys.stderr)
        return 2
    imported = sum(import_quietly(name) for name in names)
    print(f"bytecode_ahead {argv[0]}: {imported} of {len(names)} imported, {len(sys.modules)} modules loaded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
