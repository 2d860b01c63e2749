"""Bench: the Logs page on 300 runs x 2 tags against 6 runs x 200k points, server side (AppTest),
and in a browser.

Builds both folders of real event files in a temp folder (tests/logs_fixtures.py:
10 experiments x 30 runs of ``train/loss`` and ``val/acc`` with torch's
``add_hparams`` records, and 6 runs of 200,000 ``train/loss`` points), then
times, in one process, the Logs page (pages/4_Logs.py reached from app.py, as
tests/test_app_logs.py does) for each folder:

- choose: typing the folder until the page's run ends with its charts built:
  what a user waits for after choosing the folder, less the browser. The
  cached readers are cleared first, so every file is read from its first byte;
- rerun: the next run with nothing new (the readers only look for new bytes).

Times are medians of ``--repeat``. It prints both, the ratio between the two
folders, and the JSON the browser receives. ``--browser`` also opens the page
in Debian's Chromium on a real server (tests/e2e_helpers.py) and times, once
per folder, pressing Enter on the folder's path until the charts are drawn:
what the browser adds is that time less the server's "choose".

    python bench/logs_page.py [--repeat 3] [--points 200000] [--browser]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.logs_fixtures import make_experiments, make_long_runs  # noqa: E402


def page_time(folder: Path) -> tuple[float, float, int, int]:
    """(choose s, rerun s, charts, JSON bytes of the charts) for one AppTest session on
    ``folder``."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_resource.clear()  # cold readers: the folder is read from its first byte
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/4_Logs.py")
    at.run()
    at.radio(key="logs_source").set_value("a folder I type").run()
    box = at.text_input(key="logs_path").set_value(str(folder))
    t = time.perf_counter()
    box.run()
    choose = time.perf_counter() - t
    if at.exception or at.error:
        raise SystemExit(
            f"the page failed on {folder}: {at.exception or [e.value for e in at.error]}"
        )
    t = time.perf_counter()
    at.run()
    rerun = time.perf_counter() - t
    charts = at.get("plotly_chart")
    return choose, rerun, len(charts), sum(len(c.proto.spec) for c in charts)


def browser_time(folder: Path, runs_dir: Path, log_dir: Path) -> float:
    """Seconds from pressing Enter on the folder's path until two charts are drawn, in Chromium."""
    from tests.e2e_helpers import chromium_page, streamlit_server, wait_ready

    with streamlit_server(runs_dir, log_dir) as server, chromium_page(1400, 1000) as page:
        page.goto(f"{server.url}/Logs")
        wait_ready(page)
        page.locator('[data-testid="stRadio"] label', has_text="a folder I type").click()
        wait_ready(page)
        box = page.get_by_label("Path of a folder with event files (searched recursively)")
        box.fill(str(folder))
        t = time.perf_counter()
        box.press("Enter")
        page.locator('[data-testid="stPlotlyChart"] .main-svg').nth(0).wait_for(
            state="attached", timeout=120_000
        )
        wait_ready(page, timeout_ms=120_000)
        return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--repeat", type=int, default=3, help="server timings are the median of this many"
    )
    ap.add_argument(
        "--points", type=int, default=200_000, help="points per run of the 6-run folder"
    )
    ap.add_argument(
        "--browser", action="store_true", help="also time the page in Chromium (Playwright)"
    )
    args = ap.parse_args(argv)
    import logging

    # AppTest outside a server warns on every run
    logging.getLogger("streamlit").setLevel(logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="lab-bench-logs-"))
    try:
        folders = {
            "300 runs x 2 tags": tmp / "many",
            f"6 runs x {args.points:,} points": tmp / "long",
        }
        t = time.perf_counter()
        make_experiments(folders["300 runs x 2 tags"], experiments=10, points=200, hparams=True)
        make_long_runs(folders[f"6 runs x {args.points:,} points"], runs=6, points=args.points)
        size = {
            k: sum(f.stat().st_size for f in v.rglob("*") if f.is_file()) / 1e6
            for k, v in folders.items()
        }
        print(
            f"built both folders in {time.perf_counter() - t:.1f} s: "
            + ", ".join(f"{k} = {mb:.1f} MB" for k, mb in size.items())
        )
        results = {}
        for name, folder in folders.items():
            runs = [page_time(folder) for _ in range(max(1, args.repeat))]
            choose, rerun = (
                float(np.median([r[0] for r in runs])),
                float(np.median([r[1] for r in runs])),
            )
            results[name] = choose
            print(
                f"{name:>26}: choose {choose:.2f} s, rerun {rerun:.2f} s, {runs[-1][2]} charts, "
                f"{runs[-1][3] / 1e6:.2f} MB of chart JSON (median of {len(runs)}, AppTest)"
            )
        a, b = results.values()
        print(
            f"ratio {list(results)[1]} / {list(results)[0]}: {b / a:.2f}x; budget 3 s each: "
            + ("met" if max(a, b) < 3 else "NOT met")
        )
        if args.browser:
            (tmp / "runs").mkdir()
            for name, folder in folders.items():
                s = browser_time(folder, tmp / "runs", tmp / "server")
                print(
                    f"{name:>26}: browser {s:.2f} s from Enter to the charts drawn "
                    f"(the browser adds {s - results[name]:+.2f} s to the server's choose)"
                )
        print(json.dumps({"choose_s": results}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
