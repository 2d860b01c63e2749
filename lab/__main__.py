"""``python -m lab`` (or the installed ``lab``): the command line (``lab.cli``; docs/cli.md).

Started by a Python without the lab's packages (the system's, not the repo's ``.venv``), it says so
in one line naming the fix instead of a traceback.
"""

from __future__ import annotations

import sys


def run() -> int:
    try:
        from lab.cli import main
    except ModuleNotFoundError as e:  # psutil, torch...: this is not the lab's Python
        print(
            f"error: this Python ({sys.executable}) lacks the lab's packages (no module named "
            f"{e.name!r}): use the repository's venv: `source .venv/bin/activate`, then `lab ...` "
            "(`bash scripts/start.sh` builds .venv the first time)",
            file=sys.stderr,
        )
        return 2
    return main()


if __name__ == "__main__":
    sys.exit(run())
