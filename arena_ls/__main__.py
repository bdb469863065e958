"""``python -m arena_ls``: the language server."""

import sys

from arena_ls.protocol.main import main

sys.exit(main())
