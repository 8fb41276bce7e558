"""``python -m tokenwire``: the command line (see :mod:`tokenwire.cli`)."""

import sys

from tokenwire.cli import main

if __name__ == "__main__":
    sys.exit(main())
