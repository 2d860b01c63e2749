"""Home of the Parallel Training Lab: what it is, the devices right now (live),
where runs live, the runs at a glance (a badge where the supervisor flagged a
run's health: ``lab.views.live.health``), the one-click "Compare modes" sweep,
and shortcuts to the pages. ``app.py`` opens it first (``streamlit run app.py``). When the
server listens beyond this machine it says that launching from the pages is
off (or, with LAB_ALLOW_REMOTE_LAUNCH=1, that anyone reaching it may launch):
``lab.engine.launch.access``. Layout only: everything it shows comes from ``lab/``.
"""

from __future__ import annotations

import streamlit as st

from lab import runfolder as paths
from lab.engine.launch.access import launch_access
from lab.engine.noise import record as noise_record
from lab.engine.supervise.adopt import keep_adopting
from lab.engine.sweep.plan import MAX_REPEATS
from lab.views import device_strip as strip
from lab.views import linkcheck as linkcheck_view
from lab.views import text as ui_text
from lab.views import topology as topology_view
from lab.views.compare import scaling as scaling_view
from lab.views.live import health, progress
from lab.views.live import queue as live_queue
from lab.views.live import runs as live
from ui import warm
from ui.gate import require_password

st.set_page_config(page_title="Home · Parallel Training Lab", page_icon="🧪", layout="wide")
require_password()
# a run whose supervisor died gets a new watcher, from a thread: drawing starts no process
keep_adopting(paths.runs_dir())
st.title("Parallel Training Lab")
st.markdown(
    "Launch PyTorch training on one device, with `nn.DataParallel` or with "
    "`DistributedDataParallel`, "
    "watch it live, and compare the modes side by side. Your own script runs too: Launch → My "
    "script."
)
access = launch_access(st.get_option("server.address"))
if access.message:
    st.warning(access.message)


@st.fragment(run_every=2)
def device_strip() -> None:
    from lab.engine.devices.notes import holders, limits
    from lab.engine.devices.nvml import snapshot
    from lab.engine.registry import gpu_users, process_owner

    snap = snapshot(process_owner(paths.runs_dir()), gpu_users(paths.runs_dir()))
    rows = strip.device_rows(snap)
    if snap.reason:
        st.caption(f"No GPU: {snap.reason}.")
    cols = st.columns(min(4, max(1, len(rows))))
    for i, row in enumerate(rows):
        with cols[i % len(cols)]:
            st.markdown(f"**{row['label']}**")
            st.progress(row["util"] or 0.0, text=row["util_text"])
            st.progress(row["mem"] or 0.0, text=row["mem_text"])
            if row["extra"]:
                st.caption(row["extra"])
    for line in holders(snap) + limits(snap):  # who holds each GPU, and what cannot be seen
        st.caption(line)


st.subheader("Devices")
device_strip()
topo_rows, no_topo = topology_view.now()  # the links between GPUs, like `nvidia-smi topo -m`
if topo_rows:
    with st.expander("How the GPUs are linked"):
        st.dataframe(topo_rows, hide_index=True, key="home_topology")
        st.caption(topology_view.LEGEND)

root = paths.runs_dir()
st.subheader("Runs")
st.caption(f"Runs live in `{root}` (set `LAB_RUNS_DIR` to use another folder).")


@st.fragment(run_every=3)
def runs_at_a_glance() -> None:
    # Live like the device strip: progress of running runs moves without a page rerun.
    try:
        from lab.engine.registry import list_runs

        records = list_runs(root)
    except Exception as e:  # a broken runs folder must not take the home page down
        st.error(f"Cannot list the runs in {root}: {e}")
        records = []
    active, finished = live.glance(records)
    if not records:
        st.info(
            "No runs yet. Launch one from the Launch page, or press **Compare modes** below; "
            "the Compare and Logs pages show the recorded sample runs meanwhile."
        )
    for r in active:
        p = progress.progress_of(r)
        c1, c2 = st.columns([5, 1])
        sick = health.badge(r)  # the supervisor's findings, e.g. "Stalled"
        c1.progress(
            p.fraction or 0.0,
            text=f"**{live.run_label(r)}** — {p.label}" + (f" · ⚠️ {sick}" if sick else ""),
        )
        c2.page_link(
            "pages/2_Live.py",
            label="watch",
            icon=":material/monitoring:",
            query_params={"run": r.run_id},
        )
    waiting = live_queue.waiting_rows(root)  # what `lab queue` lists; `lab stop` cancels one
    if waiting:
        st.caption("Queued: each starts when the devices it needs are free of other lab runs.")
        st.dataframe(waiting, hide_index=True, key="home_queue")
    if finished:
        st.dataframe(
            [
                {
                    "run": r.run_id,
                    "mode": r.mode,
                    "state": r.state,
                    "created": ui_text.fmt_ago(r.created_at),
                    "throughput": ui_text.fmt_rate(progress.progress_of(r).samples_per_sec),
                    "took": ui_text.fmt_duration(progress.progress_of(r).elapsed_s),
                    "health": health.badge(r) or "ok",
                }
                for r in finished
            ],
            hide_index=True,
            key="home_finished",
        )


runs_at_a_glance()

st.subheader("Compare modes")
st.markdown(
    "One click runs **single**, **DP** and **DDP** with the same model, data and seed, "
    "one after another so each has the machine to itself, then compare them on the Compare page. "
    "With repeats, the modes take turns (single, DP, DDP, single, …) so the spread between runs "
    "shows."
)
scaling = st.radio(
    "Scaling",
    list(scaling_view.CHOICES),
    format_func=scaling_view.CHOICES.get,
    horizontal=True,
    key="home_scaling",
    help=scaling_view.CHOICE_HELP,
)
repeats = st.number_input(
    "repeats",
    min_value=1,
    max_value=MAX_REPEATS,
    value=3,
    step=1,
    key="home_repeats",
    help="Run every mode this many times, interleaved. 3 is the fewest that give a verdict: with "
    "fewer, Compare shows the speedups but calls none faster or slower.",
)
compare_clicked = st.button("Compare modes", type="primary", key="home_compare")
if compare_clicked and not access.allowed:
    st.error(f"Not started: {access.message}")
elif compare_clicked:
    try:
        from lab.engine.devices.nvml import usable_indices
        from lab.engine.launch.sweeps import launch_sweep
        from lab.engine.spec.run import RunConfig
        from lab.engine.sweep.plan import compare_modes_configs, interleaved

        base = RunConfig(epochs=ui_text.QUICK_EPOCHS)
        configs = interleaved(compare_modes_configs(base, usable_indices(), scaling), int(repeats))
        sweep_id, run_ids = launch_sweep(configs, root, scaling=scaling)
        st.session_state["home_sweep"] = (sweep_id, run_ids)
    except Exception as e:  # the engine names the fix; never a traceback
        st.error(f"Could not start the comparison: {e}")
sweep = st.session_state.get("home_sweep")
if sweep:
    st.success(f"Sweep {sweep[0]} started: {', '.join(sweep[1])}")
    if st.button("Stop the comparison", key="home_stop_sweep"):
        from lab.engine.launch.sweeps import stop_sweep

        try:
            final = stop_sweep(sweep[0], root)
            st.info(", ".join(f"{rid}: {state}" for rid, state in final.items()))
        except Exception as e:
            st.error(f"Could not stop sweep {sweep[0]}: {e}")
        st.session_state.pop("home_sweep", None)

st.subheader("Link check")
st.markdown(
    "How fast this machine's devices all-reduce, size by size (`lab linkcheck`): NCCL over the "
    "usable GPUs, else 2 gloo processes on the CPU; with a model, also the all-gathers and "
    "reduce-scatters of its fsdp units. Saved under the runs folder; the Compare page measures "
    "runs' collectives against the latest check."
)
max_mib = st.number_input(
    "Largest message (MiB, 0: the default)",
    min_value=0.0,
    max_value=1024.0,
    value=0.0,
    step=1.0,
    key="home_link_max_mib",
    help=linkcheck_view.MAX_MIB_HELP,
)
link_model = st.text_input(
    "Model for fsdp's sizes (optional)", key="home_link_model", help=linkcheck_view.MODEL_HELP
)
link_clicked = st.button("Check the link", key="home_linkcheck")
if link_clicked and not access.allowed:
    st.error(f"Not started: {access.message}")
elif link_clicked:
    from lab.engine import linkcheck
    from lab.engine.devices.nvml import usable_indices

    try:
        with st.spinner("All-reducing, size by size…"):
            check = linkcheck.plan(None, None, usable_indices())
            rec = linkcheck.run(
                root,
                check,
                max_bytes=linkcheck_view.max_bytes(max_mib),
                model=link_model.strip() or None,
            )
        st.caption(linkcheck_view.heading(rec))
        st.dataframe(linkcheck_view.rows(rec), hide_index=True, key="home_linkcheck_table")
        for i, (heading, rows) in enumerate(linkcheck_view.tables(rec)):
            st.caption(heading)
            st.dataframe(rows, hide_index=True, key=f"home_linkcheck_sharded_{i}")
    except linkcheck.LinkCheckError as e:
        st.error(str(e))

st.subheader("Noise floor")
st.markdown(
    "How far identical runs land apart on this machine (`lab noise`): one config, the trainer's "
    "defaults, runs this many times one after another, taking turns with every other lab run. "
    "Compare calls a speedup faster or slower only beyond the margin measured here (half the "
    "spread, at least 5%; 10% while none is measured)."
)
noise_runs = st.number_input(
    "runs", min_value=3, max_value=20, value=5, step=1, key="home_noise_runs"
)
noise_clicked = st.button("Measure this machine's noise", key="home_noise")
if noise_clicked and not access.allowed:
    st.error(f"Not started: {access.message}")
elif noise_clicked:
    from lab.engine.noise import measure

    try:
        log_path, _ = measure.start_in_background(root, int(noise_runs))
        st.success(f"Started: {int(noise_runs)} runs one after another; its output: {log_path}")
    except measure.NoiseError as e:
        st.error(str(e))
latest_noise = noise_record.latest(root)
if latest_noise:
    st.caption(noise_record.describe(latest_noise))

st.subheader("Pages")
c1, c2, c3, c4 = st.columns(4)
c1.page_link("pages/1_Launch.py", label="Launch a run", icon=":material/rocket_launch:")
c2.page_link("pages/2_Live.py", label="Watch runs live", icon=":material/monitoring:")
c3.page_link("pages/3_Compare.py", label="Compare runs", icon=":material/compare_arrows:")
c4.page_link(
    "pages/4_Logs.py", label="Browse TensorBoard logs", icon=":material/stacked_line_chart:"
)
# Once this page is drawn, the other pages' imports load in the background (ui.warm).
warm.start()
