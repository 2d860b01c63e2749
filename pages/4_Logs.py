"""Logs: browse any folder of TensorBoard event files — our runs, the sample
runs, or a path the user types — as TensorBoard does and past it: runs chosen
by a regex, by experiment or from the hyperparameters table; smoothed lines
over faint raw ones, one colour per run on every chart, log scale, outliers
ignored, charts in sections by tag prefix, each chart's data as CSV or JSON.
Layout only: the folder's runs are ``lab.views.logs.folder``, the choosing of
runs ``lab.views.logs.run_select``, the table ``lab.views.logs.hparams_table``, the
charts ``lab.views.logs.scalar_chart``, the rest ``lab.views.logs.browse``; the
folder's listing and readers are the shared cached ones (``ui.shared.log_folder``): a large folder
reads only the runs drawn until the user asks for every run's hyperparameters.
"""

from __future__ import annotations

import streamlit as st

from lab import runfolder as paths
from lab.views.logs import browse, hparams_table, run_select, scalar_chart
from lab.views.logs.folder import LogFolder
from ui import warm
from ui.gate import require_password
from ui.shared import log_folder

st.set_page_config(page_title="Logs · Parallel Training Lab", page_icon="📈", layout="wide")
require_password()
st.title("Logs")
st.caption(
    "Any folder of TensorBoard event files (torch, tensorboardX, TensorFlow 2), read incrementally."
)

MAX_CHARTS = 24
REFRESH_S = 5
TYPED = "a folder I type"
# folder -> the selected run names, kept across reruns, folders and pages
SELECTION = "logs_selection"
RUNS = "logs_runs"
RUN_RE = "logs_run_re"
TABLE = "logs_hp_table"  # the hyperparameters table's selection state
# what that table showed last: folder, each row's runs, the rows ticked
TABLE_DRAWN = "logs_hp_drawn"


def pick_folder() -> str:
    """The folder to browse (stops the page with one line when there is none)."""
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
    return str(resolved.path)


def store(where: str, runs: list[str]) -> None:
    st.session_state.setdefault(SELECTION, {})[where] = list(runs)


def from_multiselect(where: str) -> None:
    store(where, st.session_state[RUNS])


def select_matching(where: str, names: list[str]) -> None:
    # The filter as it is now, not as it was when the button was drawn: a click that
    # follows the typing at once must not select what the previous filter matched.
    store(where, run_select.match_runs(names, st.session_state.get(RUN_RE, ""))[0])


def from_toggle(where: str, runs: list[str], key: str, names: list[str]) -> None:
    selected = run_select.current(st.session_state.get(SELECTION, {}).get(where), names)
    store(where, run_select.toggle(selected, runs, st.session_state[key], names))


def experiment_toggles(where: str, names: list[str], selected: list[str]) -> None:
    groups = run_select.experiments(names)
    if len(groups) < 2:
        return  # one experiment: the runs list says it all
    with st.expander(f"Experiments ({len(groups)})", expanded=len(groups) <= 20):
        cols = st.columns(5)
        for i, (group, runs) in enumerate(groups.items()):
            key = f"logs_group_{group}"
            st.session_state[key] = run_select.group_on(selected, runs)
            cols[i % 5].checkbox(
                run_select.group_label(group, runs, selected),
                key=key,
                on_change=from_toggle,
                args=(where, runs, key, names),
            )


def hparams_section(
    folder: LogFolder, where: str, matching: list[str], selected: list[str]
) -> None:
    rows = hparams_table.rows_for(folder.hp_rows(), matching)
    if folder.lazy:
        st.button(
            f"Read every run's final metrics ({len(folder.run_names)} runs)",
            key="logs_read_all",
            on_click=folder.read_everything,
            help="A large folder is read run by run as you draw them; the table shows the "
            "metrics of the runs read so far.",
        )
    if not rows:
        st.session_state.pop(TABLE_DRAWN, None)
        return
    with st.expander(f"Hyperparameters ({len(rows)} runs)", expanded=True):
        c1, c2 = st.columns([4, 1])
        condition = c1.text_input(
            "Filter rows", key="logs_hp_filter", placeholder="e.g. lr<0.01, opt=adam, run~exp3"
        )
        varying = c2.toggle("Only what differs", value=True, key="logs_hp_varying")
        table, err = hparams_table.filter_table(
            hparams_table.hp_table(rows, folder.hparam_order(), varying), condition
        )
        if err:
            st.error(err)
        table = table.reset_index(drop=True)
        row_runs = hparams_table.row_runs(table, rows)
        ticked = run_select.rows_on(selected, row_runs)
        st.session_state[TABLE] = {"selection": {"rows": ticked, "columns": [], "cells": []}}
        st.dataframe(
            table,
            key=TABLE,
            on_select="rerun",
            selection_mode="multi-row",
            hide_index=True,
            width="stretch",
        )
        st.caption(
            "Tick rows to draw their runs. Metrics are each tag's last value; click a header to "
            "sort."
        )
        st.session_state[TABLE_DRAWN] = {"folder": where, "rows": row_runs, "ticked": ticked}


def choose_runs(folder: LogFolder, where: str) -> list[str]:
    """The run filter, experiments, runs list and table; returns the runs to draw."""
    names = folder.run_names
    selected = run_select.after_table(
        run_select.current(st.session_state.get(SELECTION, {}).get(where), names),
        st.session_state.get(TABLE_DRAWN),
        where,
        st.session_state.get(TABLE),
        names,
    )
    store(where, selected)
    c1, c2 = st.columns([4, 1])
    pattern = c1.text_input(
        "Filter runs (regex)", key=RUN_RE, placeholder=r"e.g. ^exp3/  or  lr0\.1"
    )
    matching, err = run_select.match_runs(names, pattern)
    if err:
        st.error(err)
    c2.button(
        "Select all matching",
        key="logs_select_matching",
        on_click=select_matching,
        args=(where, names),
        disabled=not matching,
        width="stretch",
    )
    drawn = run_select.shown(selected, matching)
    st.caption(run_select.count_line(len(matching), len(names), len(selected), len(drawn)))
    experiment_toggles(where, names, selected)
    st.session_state[RUNS] = selected
    st.multiselect("Runs", names, key=RUNS, on_change=from_multiselect, args=(where,))
    hparams_section(folder, where, matching, selected)
    if not drawn:
        st.info(run_select.nothing_drawn_hint(len(matching), len(selected)))
    return drawn


def draw_sections(charts: list[scalar_chart.ScalarChart], log_y: bool, outliers: bool) -> None:
    """The charts in collapsible sections by tag prefix, two to a row, each with its data to
    download; the sections past the first screen's charts start closed."""
    groups = scalar_chart.sections(charts)
    for (name, group), start in zip(groups, scalar_chart.starts_open(groups)):
        # stateful: a closed section builds no figure until the user opens it
        box = st.expander(
            f"{name} · {len(group)}", expanded=start, key=f"logs_section_{name}", on_change="rerun"
        )
        if not box.open:
            continue
        with box:
            cols = st.columns(2)
            for i, chart in enumerate(group):
                with cols[i % 2]:
                    st.markdown(f"**{chart.tag}**")
                    fig = scalar_chart.scalar_figure(chart, log_y=log_y, ignore_outliers=outliers)
                    st.plotly_chart(fig, key=f"logs_chart_{chart.tag}", width="stretch")
                    stem = scalar_chart.file_stem(chart.tag)
                    row = st.container(horizontal=True)
                    # Callables: a chart's points are serialised only when the user clicks.
                    row.download_button(
                        "CSV",
                        data=lambda c=chart: scalar_chart.chart_csv(c),
                        file_name=f"{stem}.csv",
                        mime="text/csv",
                        key=f"logs_csv_{chart.tag}",
                        on_click="ignore",
                    )
                    row.download_button(
                        "JSON",
                        data=lambda c=chart: scalar_chart.chart_json(c),
                        file_name=f"{stem}.json",
                        mime="application/json",
                        key=f"logs_json_{chart.tag}",
                        on_click="ignore",
                    )


where = pick_folder()
folder = log_folder(where)
folder.refresh()  # incremental: folders that changed, bytes written since the last rerun
if not folder.run_names:
    st.info(f"No runs with scalars under {where} yet.")
    st.stop()

runs = choose_runs(folder, where)
c1, c2, c3 = st.columns([3, 2, 2])
pattern = c1.text_input(
    "Tag filter (regex)", key="logs_tag_re", placeholder="e.g. loss|acc  or  ^sys/"
)
axis = c2.radio(
    "x axis", browse.X_AXES, horizontal=True, key="logs_axis", format_func=browse.X_TITLES.get
)
log_y = c3.radio("y axis", ["linear", "log"], horizontal=True, key="logs_yscale") == "log"
c1, c2, c3 = st.columns([4, 2, 2])
weight = c1.slider(
    "Smoothing (TensorBoard's debiased EMA)", 0.0, 0.99, 0.6, 0.01, key="logs_smooth"
)
outliers = c2.checkbox(
    "Ignore outliers in chart scaling",
    key="logs_outliers",
    help="The y axis spans the 5th to 95th percentile.",
)
auto = c3.toggle(
    f"Auto-refresh every {REFRESH_S} s",
    key="logs_auto",
    help="For a folder a trainer is still writing to.",
)
if not runs:
    st.stop()


@st.fragment(run_every=REFRESH_S if auto else None)
def show(
    runs: list[str], pattern: str, axis: str, weight: float, log_y: bool, outliers: bool
) -> None:
    folder.refresh()  # incremental: only bytes written since the last look
    scalars = folder.scalars_of(runs)
    warnings = folder.warnings
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
    charts = scalar_chart.scalar_charts(scalars, runs, tags, axis=axis, weight=weight)
    more = (
        f"; showing the first {MAX_CHARTS} charts, narrow the tag filter to see others"
        if len(charts) > MAX_CHARTS
        else ""
    )
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
    st.markdown(scalar_chart.colour_key(runs), unsafe_allow_html=True)  # the legend of every chart
    draw_sections(charts[:MAX_CHARTS], log_y, outliers)


show(runs, pattern, axis, weight, log_y, outliers)
# Once this page is drawn, the other pages' imports load in the background (ui.warm).
warm.start()
