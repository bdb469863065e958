"""The shared fake machine, imported whichever way pytest put the test tree on sys.path.

With ``tests/__init__.py`` the tree imports as ``tests.*``; without it pytest
puts ``tests/`` itself on ``sys.path`` and the helpers import as ``helpers.*``.
"""

from __future__ import annotations

try:
    from tests.helpers.fake_hardware import (
        ENV_VAR,
        FakeHardware,
        fake_gpu,
        write_fake_hardware,
    )
except ModuleNotFoundError:
    from helpers.fake_hardware import (  # type: ignore[no-redef]
        ENV_VAR,
        FakeHardware,
        fake_gpu,
        write_fake_hardware,
    )

__all__ = ["ENV_VAR", "FakeHardware", "fake_gpu", "write_fake_hardware"]
