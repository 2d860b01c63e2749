"""The warm-up (``ui.warm``) loads every module it names, once per server, off the page's thread.

Run in a fresh interpreter, where none of them is loaded yet: a name that no longer exists (a
module moved) would only be logged by the warm-up, so the test checks ``sys.modules`` itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.proc

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys
sys.path.insert(0, {repo!r})
from ui import warm
before = [m for m in warm.MODULES if m in sys.modules]
first = warm.start()
first.join(120)
again = warm.start()
print(json.dumps({{
    "before": before,
    "missing": [m for m in warm.MODULES if m not in sys.modules],
    "alive": first.is_alive(),
    "same": again is first,
    "name": first.name,
}}))
"""


def test_the_warm_up_loads_every_module_once_in_a_thread_of_its_own():
    res = subprocess.run(
        [sys.executable, "-c", CHILD.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert "pandas" not in got["before"]  # a fresh interpreter: the warm-up did the loading
    assert got["missing"] == []
    assert not got["alive"] and got["same"] and got["name"] == "lab-warm-up"
    assert "warm-up:" not in res.stderr  # nothing failed on the way
