"""scripts/cpu_census.py: a process's kind from its command line, and its CPU counted for the
test module it inherited from ``PYTEST_CURRENT_TEST``, read from a real busy child and a real idle
one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from scripts.cpu_census import census, kind

IDLE = "import time; time.sleep(1)"
BUSY = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end:\n    pass\n"


def test_kinds_by_command_line():
    py = "/repo/.venv/bin/python"
    assert kind(f"{py} -m training.train --mode single") == "trainer or torchrun"
    assert kind(f"{py} -m torch.distributed.run --nproc-per-node 2 -m training.train") == (
        "trainer or torchrun"
    )
    assert kind(f"{py} -m lab.engine.supervise.supervisor /runs/a") == "supervisor"
    assert kind(f"{py} -m lab status --json") == "python -m lab"
    assert kind(f"{py} /tmp/pytest-of-root/pytest-3/test_x0/script.py") == (
        "script in a test's folder"
    )
    assert kind("/usr/lib/chromium/chromium --headless") == "chromium"
    assert kind(f"{py} -c pass") == "other python"
    assert kind("/bin/sleep 5") == "other"


@pytest.mark.proc
def test_a_busy_child_is_counted_for_its_test_module_and_an_idle_one_costs_little(tmp_path):
    out, stop = tmp_path / "census.json", tmp_path / "stop"
    sampler = threading.Thread(target=census, args=(out, stop, 0.05))
    sampler.start()
    deadline = time.monotonic() + 30
    while not out.exists():  # written once the census has listed the processes before it
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        for module, code in (("test_busy.py", BUSY), ("test_idle.py", IDLE)):
            env = {**os.environ, "PYTEST_CURRENT_TEST": f"tests/{module}::test_x (call)"}
            subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    finally:
        stop.touch()
        sampler.join(timeout=30)
    doc = json.loads(out.read_text())
    rows = {r["module"]: r for r in doc["rows"] if r["kind"] == "other python"}
    assert doc["complete"] and rows["test_busy.py"]["processes"] == 1
    # a second of process time, less what the census misses after its last sample of the child
    # (one interval plus a scan of /proc, which a loaded machine can stretch to a few tenths);
    # the idle child costs only the interpreter's start, a few hundredths
    assert 0.6 <= rows["test_busy.py"]["cpu_s"] < 3.0, rows
    assert rows["test_idle.py"]["cpu_s"] < 0.3, rows
