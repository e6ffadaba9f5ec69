"""``python -m tilejit``: the ``tilejit`` command line."""
import sys

from tilejit.cli import main

sys.exit(main())
