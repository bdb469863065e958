"""``arena-ls`` with a fake GPU and battery injected (a test launcher, not a product mode)."""

import sys

from arena_ls.protocol.main import main
from tests.helpers.fake_hardware import FakeHardware

sys.exit(main(hardware=FakeHardware.from_env()))
