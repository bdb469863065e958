"""The top-level modules and packages bootstrap compiles ahead where Python keeps bytecode itself.

PyTorch and numpy (the tests' first processes all import them at once, and each would compile
them for itself), and arena-ls's dependencies with theirs (a server must never compile a module
on its event loop), one name per line, as they lie in the environment's site-packages. The rest
(transformers, Ray, sympy: most of the 16,600 modules) is compiled as it is first imported.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re

FIRST = ("torch", "numpy")


def requirement_name(requirement: str) -> str | None:
    """The distribution a requirement names; None for one that only an extra asks for."""
    if "extra ==" in requirement:
        return None
    return re.split(r"[\s;<>=!\[~(]", requirement, maxsplit=1)[0]


def distributions(roots: tuple[str, ...]) -> set[str]:
    """The roots and everything they require, without extras, as far as they are installed."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(key)
        todo.extend(found for found in map(requirement_name, requires) if found)
    return seen


def top_levels(names: set[str]) -> set[str]:
    """The top-level modules and packages the distributions' Python files lie in."""
    tops: set[str] = set()
    for name in names:
        for file in metadata.distribution(name).files or []:
            top = file.parts[0]
            outside = top.startswith("..") or top.endswith((".dist-info", ".data"))
            if file.suffix == ".py" and not outside:
                tops.add(top)
    return tops


if __name__ == "__main__":
    print("\n".join(sorted(top_levels(distributions((*FIRST, "arena-ls"))) - {"arena_ls"})))
