"""``python -m rlcollect.cli``: the same as the ``rlcollect`` command."""

import sys

from rlcollect.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
