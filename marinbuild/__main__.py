"""``python -m marinbuild``: the command line."""

import sys

from marinbuild.cli import main

sys.exit(main())
