"""Bench: each page's first screen on an empty runs folder and on 1,000 runs, in Chromium or
server side (AppTest).

Builds, in a temp folder, 1,000 finished runs (copies of the shipped sample runs under new ids, no
sweep records: tests/scale_fixtures.py) beside an empty runs folder, then times Home (app.py),
Live, Compare and Logs on both, interleaved (page by page, empty then full), ``--repeat`` rounds.

``--browser`` (the issue's measure): two real servers (``streamlit run app.py``,
tests/e2e_helpers.py), one per runs folder, and Debian's Chromium; a first screen is from navigation
to the page's title drawn and the app connected with no script run in flight. The first round is
each server's first visit of each page (cold: nothing listed or read yet in that process) and is
printed apart; the median and range are over the other rounds (a server that has been up).

Without ``--browser``: AppTest in this process, from the page's first run to its end, with
Streamlit's caches cleared each time.

``--points N`` (a week-long run): instead of 1,000 runs, one run (a copy of a sample run) whose
``tb/`` holds N points of each of the four trainer tags Live draws (SummaryWriter's bytes,
``bench/events_read.py``'s writer), against the same run as recorded; every page opens on it
(Live, Compare and Logs pick the newest run and the runs folder by default), each chart's first
draw (figure built and serialised) included. The first round reads the event files cold (the
event cache is written then) and is printed apart.

``--busy`` runs the rounds while a training run uses both cores: the trainer under ``torchrun``,
DDP with 2 processes on the CPU (gloo), long enough to outlast the rounds, stopped at the end.

    python bench/pages_at_scale.py --browser [--runs 1000] [--repeat 4] [--pages Compare,Logs]
    python bench/pages_at_scale.py [--runs 1000] [--repeat 3] [--busy]
    python bench/pages_at_scale.py --points 1000000 [--repeat 3] [--pages Live,Compare,Logs]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.scale_fixtures import make_runs  # noqa: E402

PAGES = {"Home": None, "Live": "pages/2_Live.py", "Compare": "pages/3_Compare.py"}
PAGES["Logs"] = "pages/4_Logs.py"
URLS = {"Home": "/", "Live": "/Live", "Compare": "/Compare", "Logs": "/Logs"}
TITLES = {
    "Home": "Parallel Training Lab",
    "Live": "Live",
    "Compare": "Compare runs",
    "Logs": "Logs",
}


def first_screen(page: str | None, root: Path) -> float:
    """Seconds from the page's first run to its first screen, with cold caches (AppTest)."""
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


def make_big_run(dst: Path, points: int) -> None:
    """One run in ``dst`` whose ``tb/`` holds ``points`` points of each of Live's four tags."""
    from bench.events_read import fast_records
    from bench.live_refresh import TAGS

    (rid,) = make_runs(dst, 1)
    tb = dst / rid / "tb"
    for f in tb.iterdir():
        f.unlink()
    with open(tb / "events.out.tfevents.1764000000.bench.0.0", "wb") as fh:
        for start in range(0, points, 50_000):
            fh.write(b"".join(fast_records(start, min(50_000, points - start), names=TAGS)))


def start_training(tmp: Path) -> subprocess.Popen:
    """A DDP training run on the CPU, 2 processes (both cores), in its own session."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "training.train", "--mode", "ddp", "--device", "cpu", "--epochs", "1000",
        "--checkpoint", "none", "--log-dir", str(tmp / "busy-run"),
    ]  # fmt: skip
    with open(tmp / "busy-run.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    time.sleep(20)  # torch's imports and the first steps: the cores are busy from here
    if proc.poll() is not None:
        raise SystemExit(f"the training run ended at once: {tmp / 'busy-run.log'}")
    return proc


def stop_training(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def browser_screen(tab, url: str, name: str) -> float:
    """Seconds from navigating ``tab`` to ``url`` to its title drawn and the script idle."""
    from tests.e2e_helpers import wait_ready

    tab.goto("about:blank")
    t = time.perf_counter()
    tab.goto(url)
    tab.get_by_role("heading", name=TITLES[name], exact=True).first.wait_for(timeout=120_000)
    wait_ready(tab, timeout_ms=120_000)
    took = time.perf_counter() - t
    if tab.locator('[data-testid="stException"]').count():
        raise SystemExit(f"{name} shows an exception at {url}")
    return took


def browser_rounds(empty: Path, full: Path, label: str, repeat: int, tmp: Path) -> dict:
    from tests.e2e_helpers import chromium_page, streamlit_server

    times: dict[tuple[str, str], list[float]] = {}
    with (
        streamlit_server(empty, tmp / "log-empty") as s0,
        streamlit_server(full, tmp / "log-full") as s1,
        chromium_page() as tab,
    ):
        for _ in range(repeat + 1):  # the first round: cold
            for name in PAGES:
                for key, server in (("0", s0), (label, s1)):
                    took = browser_screen(tab, server.url + URLS[name], name)
                    times.setdefault((name, key), []).append(took)
    return times


def report(times: dict, label: str, cold_first: bool) -> None:
    cold = " first visit (0 / N)" if cold_first else ""
    print(f"{'page':8} {'base (s)':>20} {f'{label} (s)':>22} {'ratio':>8}{cold}")
    for name in PAGES:
        a, b = times[(name, "0")], times[(name, label)]
        extra = f"   {a[0]:.2f} / {b[0]:.2f}" if cold_first else ""
        if cold_first:
            a, b = a[1:], b[1:]
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"{name:8} {ma:8.2f} ({min(a):.2f}–{max(a):.2f}) {mb:10.2f} ({min(b):.2f}–"
            f"{max(b):.2f}) {mb / ma:8.2f}{extra}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--browser", action="store_true", help="time in Chromium on real servers")
    ap.add_argument("--points", type=int, default=0, help="one run of this many points per tag")
    ap.add_argument("--busy", action="store_true", help="while a DDP run trains on both cores")
    ap.add_argument(
        "--pages", default=",".join(PAGES), help="which pages, comma-separated (default: all)"
    )
    args = ap.parse_args()
    wanted = [p.strip() for p in args.pages.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in PAGES]
    if unknown or not wanted:
        ap.error(f"--pages: {', '.join(unknown) or 'none given'}; choose from {', '.join(PAGES)}")
    for name in [p for p in PAGES if p not in wanted]:
        del PAGES[name]
    tmp = Path(tempfile.mkdtemp(prefix="lab-bench-scale-"))
    label = f"{args.points}-point" if args.points else str(args.runs)
    busy = None
    try:
        empty, full = tmp / "empty", tmp / "full"
        empty.mkdir()
        full.mkdir()
        if args.points:
            make_runs(empty, 1)  # the same run as recorded: the baseline
            make_big_run(full, args.points)
        else:
            make_runs(full, args.runs)
        busy = start_training(tmp) if args.busy else None
        if args.browser:
            times = browser_rounds(empty, full, label, args.repeat, tmp)
        else:
            times = {}
            for _ in range(args.repeat):
                for name, page in PAGES.items():
                    for key, root in (("0", empty), (label, full)):
                        times.setdefault((name, key), []).append(first_screen(page, root))
        mode = "Chromium, navigation to first screen" if args.browser else "AppTest, server side"
        what = f"one run of {args.points} points per tag" if args.points else f"{args.runs} runs"
        base = "the run as recorded" if args.points else "an empty runs folder"
        print(f"{mode}; {what} against {base}; {args.repeat} rounds")
        if args.busy:
            print("while a DDP training run (2 processes, gloo) uses both cores")
        report(times, label, cold_first=args.browser or bool(args.points))
    finally:
        if busy is not None:
            stop_training(busy)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
