"""Bench: each page's first screen on an empty runs folder and on 1,000 runs, server side (AppTest).

Builds, in a temp folder, 1,000 finished runs (copies of the shipped sample runs under new ids, no
sweep records: tests/scale_fixtures.py), then times, interleaved in one process, the first run of
Home (app.py), Live, Compare and Logs (reached from app.py with ``switch_page``) with LAB_RUNS_DIR
on the empty folder and on the full one, cold caches each time. It prints per page the median and
the range of ``--repeat`` runs for 0 and 1,000 runs, and their ratio. The browser adds its own
drawing on top (bench/logs_page.py --browser measures that for Logs).

    python bench/pages_at_scale.py [--runs 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.scale_fixtures import make_runs  # noqa: E402

PAGES = {"Home": None, "Live": "pages/2_Live.py", "Compare": "pages/3_Compare.py"}
PAGES["Logs"] = "pages/4_Logs.py"


def first_screen(page: str | None, root: Path) -> float:
    """Seconds from the page's first run to its first screen, with cold caches."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["LAB_RUNS_DIR"] = str(root)
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    t = time.perf_counter()
    at.run()
    if page:
        t = time.perf_counter()  # the page's own run, not Home's before it
        at.switch_page(page).run()
    took = time.perf_counter() - t
    if at.exception:
        raise SystemExit(f"{page or 'app.py'} failed on {root}: {at.exception}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lab-bench-scale-"))
    try:
        empty, full = tmp / "empty", tmp / "full"
        empty.mkdir()
        full.mkdir()
        make_runs(full, args.runs)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeat):
            for name, page in PAGES.items():
                for label, root in (("0", empty), (str(args.runs), full)):
                    times.setdefault((name, label), []).append(first_screen(page, root))
        print(f"{'page':8} {'0 runs (s)':>20} {f'{args.runs} runs (s)':>22} {'ratio':>8}")
        for name in PAGES:
            a, b = times[(name, "0")], times[(name, str(args.runs))]
            ma, mb = statistics.median(a), statistics.median(b)
            print(
                f"{name:8} {ma:8.2f} ({min(a):.2f}–{max(a):.2f}) {mb:10.2f} ({min(b):.2f}–"
                f"{max(b):.2f}) {mb / ma:8.1f}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
