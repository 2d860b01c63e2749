"""Where the CPU of a test run goes: by kind of process and by the test module that started it.

    python scripts/cpu_census.py --out census.json --until STOPFILE [--every 0.2]

Beside a run of the suite (``CI=true bash .ci/run``), samples ``/proc`` every ``--every``
seconds until ``STOPFILE`` exists, then writes ``--out``: for each kind of process (the trainer
or torchrun, a user's script, the supervisor, ``python -m lab``, Streamlit, Chromium, the
pytest workers...) and each test module, the CPU seconds (user and system) of the processes born
after the census started, and how many there were. A process is attributed to the test whose
``PYTEST_CURRENT_TEST`` it inherited (pytest sets it while a test runs; the supervisor, the
trainer and torchrun's ranks inherit it from the test that launched them); a process started
with an environment copied before its test ran (a module-level ``{**os.environ, ...}``) has none
and counts under ``-``, as do the workers, Chromium and the install. The pass time, the
wall clock, says little on a shared 2-core machine; the CPU a module costs is what a cut saves.
A process shorter than one sample interval is missed, and one seen last is counted as last seen
(at most one interval stale). It writes the file once it has started (the processes living then
are left out) and again every 30 s, so a run stopped early still leaves its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import Counter
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
TEST_FOLDER = re.compile(r"/pytest-\d+/(?:popen-gw\d+/)?([A-Za-z_][A-Za-z0-9_]*?)\d+/")
KINDS = (  # the first whose words appear in the command line names the kind
    ("trainer or torchrun", ("training.train", "torch.distributed.run")),
    ("supervisor", ("lab.engine.supervise",)),
    ("streamlit server", ("streamlit",)),
    ("chromium", ("chromium", "chrome")),
    ("pytest worker", ("import sys;exec(eval(sys.stdin.readline()))",)),
    ("slurm or munge", ("slurm", "munge")),
    ("python -m lab", (" -m lab",)),
    ("script in a test's folder", ("/pytest-of-",)),
    ("example script", ("examples/",)),
    ("install", ("uv ", "pip ")),
)


def kind(cmdline: str) -> str:
    """The kind of a process by its command line (arguments joined with spaces)."""
    for name, words in KINDS:
        if any(w in cmdline for w in words):
            return name
    return "other python" if "python" in cmdline else "other"


def _read(pid: str) -> tuple[str, float, str] | None:
    """(start time in ticks, CPU seconds so far, parent pid) of ``pid``, or None once it is
    gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19], (int(fields[11]) + int(fields[12])) / TICKS, fields[1]


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _describe(pid: str, raw: bytes, parents_module: str) -> tuple[str, str] | None:
    """(kind, test module) of ``pid`` whose command line is ``raw``, or None when it is gone or
    has none; ``parents_module`` is its parent's, where neither its environment nor its folders
    name one."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    cmdline = " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    if not cmdline:
        return None
    test = next((e[20:].decode() for e in env if e.startswith(b"PYTEST_CURRENT_TEST=")), "")
    if test:
        return kind(cmdline), test.split("::", 1)[0].rsplit("/", 1)[-1]
    folder = TEST_FOLDER.search(f"{cmdline} {cwd}/")
    if folder:
        return kind(cmdline), f"test {folder.group(1)}"
    return kind(cmdline), parents_module


def census(out: Path, until: Path, every: float = 0.2) -> dict:
    """Sample until ``until`` exists; the figures, also written to ``out``."""
    before = {p for p in os.listdir("/proc") if p.isdigit()}
    # (pid, start) -> [kind, module, cpu, command line]: a child between fork and exec still has
    # its parent's command line and environment, so a process is described again when it changes
    live: dict[tuple[str, str], list] = {}
    module_of: dict[str, str] = {}  # pid -> module of the live processes, for their children
    cpu: Counter = Counter()
    count: Counter = Counter()

    def write(final: bool) -> dict:
        totals, n = Counter(cpu), Counter(count)
        for k, module, used, _ in live.values():
            totals[(k, module)] += used
            n[(k, module)] += 1
        rows = [
            {"kind": k, "module": m, "cpu_s": round(totals[(k, m)], 2), "processes": n[(k, m)]}
            for k, m in sorted(totals, key=lambda key: -totals[key])
        ]
        doc = {"complete": final, "cpu_s": round(sum(totals.values()), 1), "rows": rows}
        out.write_text(json.dumps(doc, indent=1))
        return doc

    written = time.monotonic()
    write(final=False)  # started: what exists from here on is before the census
    while not until.exists():
        seen = set()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in before:
                continue
            state = _read(pid)
            if state is None:
                continue
            key, raw = (pid, state[0]), _cmdline(pid)
            if key not in live or live[key][3] != raw:
                described = _describe(pid, raw, module_of.get(state[2], "-"))
                if described is None:
                    continue
                live[key] = [*described, 0.0, raw]
                module_of[pid] = described[1]
            live[key][2] = state[1]
            seen.add(key)
        for key in set(live) - seen:  # ended since the last sample
            k, module, used, _ = live.pop(key)
            module_of.pop(key[0], None)
            cpu[(k, module)] += used
            count[(k, module)] += 1
        if time.monotonic() - written > 30:
            write(final=False)
            written = time.monotonic()
        time.sleep(every)
    return write(final=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    ap.add_argument("--until", type=Path, required=True, help="stop once this file exists")
    ap.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    args = ap.parse_args(argv)
    doc = census(args.out, args.until, args.every)
    for row in doc["rows"][:30]:
        print(f"{row['cpu_s']:9.1f} s {row['processes']:5}  {row['kind']:26} {row['module']}")
    print(f"{doc['cpu_s']:9.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
