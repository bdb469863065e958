"""``arena`` whose server is ``tests.helpers.fake_server`` (a fake GPU injected): a test launcher only.

The terminal client always starts ``python -m arena_ls`` on the real
machine; a test that must pin what the server measures (a probe's VRAM
peak) runs the client through this module instead, with
``ARENA_FAKE_HARDWARE`` naming the fake machine and the repository on
``PYTHONPATH`` (the server it starts inherits both).
"""

import sys

from arena_ls.client import session
from arena_ls.client.cli import main


def fake_server_command() -> list[str]:
    return [sys.executable, "-m", "tests.helpers.fake_server"]


session.server_command = fake_server_command
sys.exit(main())
