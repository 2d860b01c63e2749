"""Live: one run as it trains — state, progress with ETA and throughput, per-device utilisation and
memory over time, loss and accuracy curves, the log tail (per rank for DDP), each rank's profiler
trace once written (a run launched with Profile steps), a Stop button, on failure the diagnosis, and
a "busy machine" warning when other processes shared the machine (``lab.views.compare.noise``), the
run's health findings as a banner at the top with the stacks of a stalled run and a "Dump stacks
now" button, torchrun's restarts with their causes, the resume links and, for a failed, stopped or
lost run, "Resume" (``lab.views.live.health``, ``lab.engine.launch.resume``); for a Slurm run also
its job (state, nodes, why it waits) and each node's device samples. The live part refreshes every 2
s inside a fragment, reading the run's event files incrementally through the shared cached reader
(``ui.shared``). A user's script run reads the folders of event files linked to it too, draws every
tag it logs, and takes its progress from those events. Layout only: see ``lab.views.live.runs``,
``lab.views.live.health``, ``lab.views.live.progress``, ``lab.views.live.run_charts``,
``lab.views.live.script_run``, ``lab.views.compare.anatomy`` (the traces) and
``lab.views.live.nodes`` (a Slurm job's nodes)."""

from __future__ import annotations

import streamlit as st

from lab import runfolder as paths
from lab.views import runscalars
from lab.views import text as ui_text
from lab.views.compare import anatomy, noise
from lab.views.live import health, nodes, progress, run_charts, script_run
from lab.views.live import runs as live
from ui import warm
from ui.gate import require_password
from ui.shared import chart_grid, event_reader

st.set_page_config(page_title="Live · Parallel Training Lab", page_icon="📡", layout="wide")
require_password()
st.title("Live")

REFRESH_S = 2


def _records(root):
    from lab.engine.registry import list_runs

    return list_runs(root)


root = paths.runs_dir()
try:
    records = _records(root)
except Exception as e:  # a broken runs folder is a message, not a traceback
    st.error(f"Cannot list the runs in {root}: {e}")
    st.stop()
source_note = None
if not records and paths.SAMPLE_RUNS.is_dir():
    root = paths.SAMPLE_RUNS
    records = _records(root)
    source_note = (
        "You have no runs yet: showing the recorded sample runs. Launch one from the Launch page."
    )
if not records:
    st.info("No runs yet. Launch one from the Launch page.")
    st.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")
    st.stop()
if source_note:
    st.info(source_note)

by_id = {r.run_id: r for r in live.newest_first(records)}
wanted = st.query_params.get("run")
if wanted in by_id and st.session_state.get("live_wanted") != wanted:
    # A link from the Launch page names the run once; after that the picker rules.
    st.session_state["live_wanted"] = wanted
    st.session_state["live_run"] = wanted
if st.session_state.get("live_run") not in by_id:
    st.session_state["live_run"] = live.default_run(records)
run_id = st.selectbox(
    "Run", list(by_id), key="live_run", format_func=lambda i: live.run_label(by_id[i], state=False)
)
# The URL names the run shown, so it can be shared or reloaded; remembering it
# keeps the next rerun from taking it for a new link.
st.session_state["live_wanted"] = run_id
st.query_params["run"] = run_id
record = by_id[run_id]


def _scalars(rec) -> dict:
    """The run folder's scalars (tb/ and sys/), and a script's linked folders' merged in."""
    parts = [runscalars.run_scalars(event_reader(str(rec.run_dir)))]
    parts += [runscalars.run_scalars(event_reader(d)) for d in script_run.outside_dirs(rec)]
    return runscalars.merge_parts(parts)


def _header(rec, scalars) -> None:
    p = progress.progress_of(rec, scalars=scalars)
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    c1.markdown(f"### {rec.state}")
    if script_run.is_script(rec):
        c2.metric("Steps/s", "–" if p.steps_per_sec is None else f"{p.steps_per_sec:.3g}")
    else:
        c2.metric(
            "Throughput (samples/s)",
            "–" if p.samples_per_sec is None else f"{p.samples_per_sec:,.0f}",
        )
    c3.metric("Elapsed", ui_text.fmt_duration(p.elapsed_s))
    c4.metric("ETA", ui_text.fmt_duration(p.eta_s) if rec.state == paths.RUNNING else "–")
    st.progress(p.fraction or 0.0, text=p.label)
    for line in nodes.job_lines(rec):  # a Slurm run: its job, and why it waits
        st.caption(ui_text.md_escape(line))
    note = live.fallback_note(rec)
    if note:
        st.warning(note)
    from lab.engine.registry import status_record

    busy = noise.busy_note(status_record(rec.run_dir).interference)
    if busy:
        st.warning(busy, icon="⚠️")
    with st.expander("What was asked"):
        lines = (
            script_run.config_lines(rec) if script_run.is_script(rec) else live.config_lines(rec)
        )
        st.code("\n".join(lines) or "(no run.json)", language=None)


def _health(rec) -> None:
    """The findings as a banner, then the newest stacks, the restarts and the resume links."""
    for box in health.banner(rec):
        body = (
            f"**{box['title']}** (since {box['since']}): {ui_text.md_escape(box['message'])}\n\n"
            f"**Fix:** {ui_text.md_escape(box['fix'])}"
        )
        lines = "".join(f"\n- {ui_text.md_escape(line)}" for line in box["lines"])
        (st.error if box["key"] in ("stalled", "nan_loss") else st.warning)(body + lines, icon="🩺")
    at, files = health.stack_files(rec.run_dir)
    if files:
        with st.expander(
            f"Stacks of every rank ({at})",
            expanded=any(b["key"] == "stalled" for b in health.banner(rec)),
        ):
            for who, path in files:
                st.markdown(f"**{who}** · `{path.name}`")
                st.code(
                    path.read_text(errors="replace"), language=None, height=240, wrap_lines=False
                )
    for line in health.restart_lines(rec) + health.link_lines(rec):
        st.caption(line)


def _failure(rec) -> None:
    box = live.failure_box(rec)
    if not box:
        return
    from lab.engine.logs import tail

    lines = box.get("excerpt") or ""
    if not lines and box.get("rank") is not None:
        lines = tail(rec.run_dir, lines=30, rank=box["rank"])
    who = f" (rank {box['rank']})" if box.get("rank") is not None else ""
    st.error(
        f"**Why it failed{who}:** {ui_text.md_escape(box['cause'])}\n\n**Fix:** "
        f"{ui_text.md_escape(box['fix'])}"
    )
    if lines:
        st.code(lines, language=None, wrap_lines=True)


def _charts(rec, scalars) -> None:
    tb, sysd = runscalars.split_sys(scalars)
    script = script_run.is_script(rec)
    train_specs = script_run.curve_charts(tb) if script else run_charts.train_charts(tb)
    sys_specs, sys_note = run_charts.sys_charts(sysd)
    waiting = script_run.waiting_note(rec, tb) if script else None
    if waiting:
        st.info(waiting)
    elif not train_specs and not sys_specs:
        st.info("No scalars yet: the first points appear after the first logging window.")
    chart_grid(train_specs + sys_specs, "live_chart")
    if sys_note:
        st.caption(sys_note)
    for label, specs in nodes.node_charts(sysd):  # a Slurm run: each node's own sampler
        st.markdown(f"**Devices of {label}**")
        chart_grid(specs, f"live_{label.replace(' ', '')}")


def _download_row(title: str, files, mime: str, key: str, help: str | None = None) -> None:
    """One download button per file, four to a row, under ``title``."""
    if not files:
        return
    st.markdown(title)
    for col, (label, file_name, path) in zip(st.columns(min(len(files), 4)) * len(files), files):
        col.download_button(
            label,
            lambda p=path: p.read_bytes(),
            file_name=file_name,
            mime=mime,
            on_click="ignore",
            key=f"{key}_{file_name}",
            help=help,
        )


def _traces(rec) -> None:
    _download_row(
        "**Profiler traces** (open them in ui.perfetto.dev)",
        anatomy.trace_downloads(rec.run_dir, rec.run_id),
        "application/gzip",
        "live_trace",
    )


def _snapshots(rec) -> None:
    _download_row(
        f"**CUDA memory snapshots** (open them at {anatomy.SNAPSHOT_VIEWER})",
        anatomy.snapshot_downloads(rec.run_dir, rec.run_id),
        "application/octet-stream",
        "live_snapshot",
        help=f"The caching allocator's history: open it at {anatomy.SNAPSHOT_VIEWER}",
    )


def _log(rec) -> None:
    from lab.engine.logs import ranks, tail

    def show(rank=None) -> None:
        st.code(
            tail(rec.run_dir, lines=200, rank=rank) or "(empty)",
            language=None,
            height=300,
            wrap_lines=True,
        )

    st.markdown("**Log**")
    rank_list = ranks(rec.run_dir)
    if len(rank_list) <= 1:
        show()
        return
    tabs = st.tabs(["all"] + [f"rank {r}" for r in rank_list])
    for tab, r in zip(tabs, [None, *rank_list]):
        with tab:
            show(r)


@st.fragment(run_every=REFRESH_S if live.is_active(record.state) else None)
def live_view(run_id: str, started_active: bool) -> None:
    from lab.engine.registry import get_run

    try:
        rec = get_run(run_id, root)
    except Exception as e:
        st.error(f"Run {run_id} cannot be read any more: {e}")
        return
    if started_active and not live.is_active(rec.state):
        st.rerun()  # the run just ended: redraw the page once, without the timer
    scalars = _scalars(rec)
    _health(rec)
    _header(rec, scalars)
    _failure(rec)
    _charts(rec, scalars)
    _traces(rec)
    _snapshots(rec)
    _log(rec)


if live.is_active(record.state) and root != paths.SAMPLE_RUNS:
    if st.button("Stop", type="secondary", key="live_stop", help=live.stop_help(record)):
        from lab.engine.launch.launcher import stop

        try:
            final = stop(run_id, root)
            st.toast(f"{run_id}: {final}")
        except Exception as e:
            st.error(f"Could not stop {run_id}: {e}")
        st.rerun()

if live.is_active(record.state) and root != paths.SAMPLE_RUNS:
    if st.button(
        "Dump stacks now",
        key="live_stacks",
        help="Every rank's Python stack, saved under stacks/ and shown "
        "here (the trainer's own handler, py-spy for other programs)",
    ):
        from lab.engine.launch.launcher import request_stacks

        try:
            request_stacks(run_id, root)
            st.toast(
                "Asked the supervisor for every rank's stack: they appear below in a few seconds."
            )
        except Exception as e:
            st.error(f"Could not ask for the stacks of {run_id}: {e}")
if root != paths.SAMPLE_RUNS:
    from lab.engine.launch.resume import resumable

    if resumable(record) is None and st.button(
        "Resume",
        key="live_resume",
        help="A new run with the same config, continuing from this run's checkpoints/last.pt",
    ):
        from lab.engine.launch.resume import resume

        try:
            # the next run of the page opens it, as a link would
            st.query_params["run"] = resume(run_id, root)
            st.rerun()
        except Exception as e:  # the engine names the fix; never a traceback
            st.error(f"Could not resume {run_id}: {e}")

live_view(run_id, live.is_active(record.state))
# Once this page is drawn, the other pages' imports load in the background (ui.warm).
warm.start()
