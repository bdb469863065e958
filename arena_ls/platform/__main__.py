"""``python -m arena_ls.platform detach REQUEST``: the intermediate that starts the job agent (Windows)."""

import sys

from arena_ls.platform.launching import detach_main

sys.exit(detach_main(sys.argv[1:]))
