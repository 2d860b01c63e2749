"""Bench: the Compare page's data path with 6 runs of 200k points each, against drawing every point.

Builds N run folders of real TensorBoard event files in a temp folder (each
``tb/`` holds ``train/loss`` with P points; ``--sys`` adds P samples of
``sys/gpu0/util_pct`` under ``sys/``), reads them with ``lab.events`` the way
the pages do (one ``LogdirReader`` per run folder), then times, in one run:

- page path: ``lab.views.charts.line_figure`` (every trace reduced by
  ``lab.views.downsample.minmax`` to at most ``--max-points``) + ``fig.to_json()``;
- all points: the same figure with every point + ``fig.to_json()``;
- a page rerun: ``refresh()`` of the cached readers (no new data) + the page path.

Times are medians of ``--repeat`` calls after one warm-up. It prints the times, the JSON sizes the
browser would receive, the ratios and the points per trace. Default runtime is well under two
minutes on 2 cores.

    python bench/dashboard_points.py [--runs 6] [--points 200000] [--max-points 2000] [--sys]
    [--browser]

``--browser`` also draws both sets of figures in headless Chromium (Debian's
/usr/bin/chromium through Playwright) and times Plotly.newPlot: the cost the
user actually waits for.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.events.tfrecord import frame  # noqa: E402
from lab.views import charts  # noqa: E402
from lab.views.runscalars import merge_parts  # noqa: E402


def write_events(
    path: Path, tag: str, steps: np.ndarray, values: np.ndarray, t0: float, dt: float
) -> None:
    """One real event file (file_version record, then one scalar per step)."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    path.parent.mkdir(parents=True, exist_ok=True)
    chunks = [frame(Event(wall_time=t0, file_version="brain.Event:2").SerializeToString())]
    for s, v in zip(steps.tolist(), values.tolist()):
        ev = Event(
            wall_time=t0 + s * dt,
            step=s,
            summary=Summary(value=[Summary.Value(tag=tag, simple_value=v)]),
        )
        chunks.append(frame(ev.SerializeToString()))
    path.write_bytes(b"".join(chunks))


def build(root: Path, runs: int, points: int, with_sys: bool) -> list[Path]:
    rng = np.random.default_rng(0)
    dirs = []
    for i in range(runs):
        d = root / f"run{i}"
        steps = np.arange(points, dtype=np.int64)
        loss = (2.5 * np.exp(-steps / (points / 5)) + 0.05 * rng.standard_normal(points)).astype(
            np.float32
        )
        write_events(
            d / "tb" / f"events.out.tfevents.{1764400000 + i}.bench",
            "train/loss",
            steps,
            loss,
            1764400000.0,
            0.01,
        )
        if with_sys:
            util = np.clip(
                80 + 20 * np.sin(steps / 7.0) + 5 * rng.standard_normal(points), 0, 100
            ).astype(np.float32)
            write_events(
                d / "sys" / f"events.out.tfevents.{1764400000 + i}.bench",
                "sys/gpu0/util_pct",
                steps,
                util,
                1764400000.0,
                0.5,
            )
        dirs.append(d)
    return dirs


def traces_of(scalars: dict[str, dict]) -> dict[str, list[tuple[str, np.ndarray, np.ndarray]]]:
    by_tag: dict[str, list] = {}
    for name, tags in scalars.items():
        for tag, s in tags.items():
            by_tag.setdefault(tag, []).append((name, s.step, s.value))
    return by_tag


def page_figures(by_tag, max_points: int) -> list[go.Figure]:
    return [
        charts.line_figure(tr, x_title="step", y_title=tag, max_points=max_points)
        for tag, tr in by_tag.items()
    ]


def full_figures(by_tag) -> list[go.Figure]:
    figs = []
    for tag, tr in by_tag.items():
        fig = go.Figure([go.Scatter(x=x, y=y, name=n, mode="lines") for n, x, y in tr])
        fig.update_layout(xaxis_title="step", yaxis_title=tag)
        figs.append(fig)
    return figs


def to_json_bytes(figs: list[go.Figure]) -> int:
    return sum(len(f.to_json()) for f in figs)


def browser_ms(figs: list[go.Figure], chromium: str, timeout_s: float = 120.0) -> float:
    """Milliseconds headless Chromium takes to draw ``figs`` (Plotly.newPlot until its promises
    resolve)."""
    from playwright.sync_api import sync_playwright
    from plotly.offline import get_plotlyjs

    specs = ",".join(f.to_json() for f in figs)
    divs = "".join(
        f'<div id="f{i}" style="width:1000px;height:400px"></div>' for i in range(len(figs))
    )
    html = (
        f"<html><body>{divs}<script>{get_plotlyjs()}</script><script>"
        f"const figs=[{specs}];const t0=performance.now();"
        "Promise.all(figs.map((f,i)=>Plotly.newPlot('f'+i,f.data,f.layout)))"
        ".then(()=>{window.__ms=performance.now()-t0;});</script></body></html>"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.set_content(html, timeout=timeout_s * 1000)
            page.wait_for_function("window.__ms !== undefined", timeout=timeout_s * 1000)
            return float(page.evaluate("window.__ms"))
        finally:
            browser.close()


def timed(fn, repeat: int):
    """Median wall time of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--max-points", type=int, default=charts.DEFAULT_MAX_POINTS)
    ap.add_argument("--repeat", type=int, default=3, help="timings are the median of this many")
    ap.add_argument(
        "--browser",
        metavar="CHROMIUM",
        nargs="?",
        const="/usr/bin/chromium",
        help="also time drawing both in headless Chromium (Playwright); adds up to a few minutes",
    )
    ap.add_argument("--sys", action="store_true", help="also a sys/gpu0/util_pct timeline per run")
    args = ap.parse_args(argv)

    from lab.events import LogdirReader

    tmp = Path(tempfile.mkdtemp(prefix="lab-bench-points-"))
    try:
        t = time.perf_counter()
        dirs = build(tmp, args.runs, args.points, args.sys)
        t_build = time.perf_counter() - t
        size_mb = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file()) / 1e6
        print(
            f"built {args.runs} runs x {args.points:,} points{' (+ sys)' if args.sys else ''}: "
            f"{size_mb:.1f} MB of events in {t_build:.1f} s"
        )

        t = time.perf_counter()
        readers = {d.name: LogdirReader(str(d)) for d in dirs}
        for r in readers.values():
            r.refresh()
        scalars = {
            n: merge_parts(r.scalars(s) for s in sorted(r.run_names())) for n, r in readers.items()
        }
        t_read = time.perf_counter() - t
        by_tag = traces_of(scalars)
        n_traces = sum(len(v) for v in by_tag.values())
        print(f"first read (lab.events, {n_traces} traces): {t_read:.2f} s")

        def page() -> tuple[list[go.Figure], int]:
            figs = page_figures(by_tag, args.max_points)
            return figs, to_json_bytes(figs)

        def full() -> tuple[list[go.Figure], int]:
            figs = full_figures(by_tag)
            return figs, to_json_bytes(figs)

        def rerun() -> tuple[list[go.Figure], int]:
            for r in readers.values():
                r.refresh()
            sc = {
                n: merge_parts(r.scalars(s) for s in sorted(r.run_names()))
                for n, r in readers.items()
            }
            figs = page_figures(traces_of(sc), args.max_points)
            return figs, to_json_bytes(figs)

        page()  # warm-up: plotly's first figure pays for its imports and validators
        t_page, (pfigs, page_json) = timed(page, args.repeat)
        t_full, (_, full_json) = timed(full, args.repeat)
        t_rerun, _ = timed(rerun, args.repeat)

        per_trace = max(len(tr.y) for f in pfigs for tr in f.data)
        print(
            f"page path (minmax to <= {args.max_points} + figure + to_json): {t_page:.3f} s, "
            f"{page_json / 1e6:.2f} MB JSON, {per_trace} points per trace"
        )
        print(
            f"all points (figure + to_json):                  {t_full:.3f} s, "
            f"{full_json / 1e6:.2f} MB JSON, {args.points} points per trace"
        )
        print(f"ratio all/page: time {t_full / t_page:.1f}x, JSON {full_json / page_json:.1f}x")
        print(
            f"page rerun (cached readers refresh + page path): {t_rerun:.3f} s (median of "
            f"{args.repeat})"
        )
        if args.browser:
            b_page = browser_ms(pfigs, args.browser)
            b_full = browser_ms(full()[0], args.browser)
            print(
                f"browser draw (headless Chromium, Plotly.newPlot): page {b_page:.0f} ms, "
                f"all points {b_full:.0f} ms, ratio {b_full / b_page:.1f}x"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
