"""``python -m lab``: the command line (``lab.cli``; docs/cli.md)."""

from __future__ import annotations

import sys

from lab.cli import main

if __name__ == "__main__":
    sys.exit(main())
