"""Logs: browse any folder of TensorBoard event files — our runs, the sample
runs, or a path the user types — with a tag filter, smoothing, a choice of
x axis, several runs overlaid, and a CSV of the selected scalars. Layout
only; the logic is ``lab.views.browse``, a run folder's ``tb/`` + ``sys/``
as one run ``lab.views.runscalars``, and the reading ``lab.events`` through
the shared cached reader (``ui.shared``).
"""
from __future__ import annotations

import streamlit as st

from lab import runfolder as paths
from lab.views import browse, runscalars
from ui.shared import chart_grid, event_reader

st.set_page_config(page_title="Logs · Parallel Training Lab", page_icon="📈", layout="wide")
st.title("Logs")
st.caption("Any folder of TensorBoard event files (torch, tensorboardX, TensorFlow 2), read incrementally.")

MAX_CHARTS = 24
REFRESH_S = 5
TYPED = "a folder I type"


choices = browse.folder_choices(paths.runs_dir(), paths.SAMPLE_RUNS)
source = st.radio("Folder", [*choices, TYPED], horizontal=True, key="logs_source")
if source == TYPED:
    typed = st.text_input(
        "Path of a folder with event files (searched recursively)",
        key="logs_path",
        placeholder="~/experiments/tb or runs/ or sample_data/runs",
    )
    if not typed.strip():
        st.info("Type a folder path above; every run below it is found recursively.")
        st.stop()
    resolved = browse.resolve_logdir(typed, base=paths.REPO_ROOT)
else:
    resolved = browse.resolve_logdir(str(choices[source]))

if resolved.path is not None:
    st.caption(f"Reading `{resolved.path}`")
if not resolved.ok:
    st.error(resolved.error)
    st.stop()

reader = event_reader(str(resolved.path))
reader.refresh()  # incremental: only bytes written since the last rerun
groups = runscalars.group_parts(reader.run_names())  # a run folder's tb/ and sys/ show as one run
run_names = list(groups)
if not run_names:
    st.info(f"No runs with scalars under {resolved.path} yet.")
    st.stop()

c1, c2, c3 = st.columns([3, 2, 2])
with c1:
    runs = st.multiselect("Runs", run_names, default=browse.default_runs(run_names), key=f"logs_runs_{resolved.path}")
with c2:
    pattern = st.text_input("Tag filter (regex)", key="logs_tag_re", placeholder="e.g. loss|acc  or  ^sys/")
with c3:
    axis = st.radio("x axis", browse.X_AXES, horizontal=True, key="logs_axis", format_func=browse.X_TITLES.get)
c1, c2 = st.columns([5, 2])
weight = c1.slider("Smoothing (TensorBoard's debiased EMA)", 0.0, 0.99, 0.6, 0.01, key="logs_smooth")
auto = c2.toggle(f"Auto-refresh every {REFRESH_S} s", key="logs_auto", help="For a folder a trainer is still writing to.")

if not runs:
    st.info("Pick at least one run.")
    st.stop()


@st.fragment(run_every=REFRESH_S if auto else None)
def show(runs: list[str], pattern: str, axis: str, weight: float) -> None:
    reader.refresh()  # incremental: only bytes written since the last look
    scalars = {r: runscalars.merge_parts(reader.scalars(part) for part in groups.get(r, [r])) for r in runs}
    warnings = list(reader.warnings)
    if warnings:
        with st.expander(f"{len(warnings)} warning(s) while reading"):
            for w in warnings[-50:]:
                st.text(w)

    tags, err = browse.filter_tags(browse.all_tags(scalars), pattern)
    if err:
        st.error(err)
        return
    if not tags:
        st.info("No scalar tag matches the filter in the chosen runs.")
        return

    specs = browse.overlay_charts(scalars, runs, tags, axis=axis, weight=weight)
    more = f"; showing the first {MAX_CHARTS} charts, narrow the tag filter to see others" if len(specs) > MAX_CHARTS else ""
    st.caption(f"{len(runs)} run(s), {len(tags)} tag(s){more}")
    st.download_button(
        "Download the selected scalars (CSV)",
        # A callable: the CSV of every point is built only when the user clicks.
        data=lambda: browse.scalars_csv(scalars, runs, tags, weight=weight),
        file_name="scalars.csv",
        mime="text/csv",
        key="logs_csv",
        on_click="ignore",
    )
    # Titles go above the figures: with long run names the legend would cover them.
    chart_grid(specs[:MAX_CHARTS], "logs_chart", titles_above=True)


show(runs, pattern, axis, weight)
