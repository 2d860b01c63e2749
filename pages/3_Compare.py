"""Compare page: finished runs side by side — table, warnings, repeats, charts, exports.

Thin by design: it reads the widgets, asks the registry for the runs, builds one ``Comparison``
(``lab.views.compare.comparison.compare``) and draws it: the table (``lab.views.compare.table``),
the charts (``lab.views.compare.curves``; a resumed run joined to the runs it continues:
``lab.views.compare.chain``), the CSV and the HTML report (``lab.views.compare.report``). Event
files are read through the shared cached readers (``ui.shared``). Session keys carry the ``cmp_``
prefix.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from lab.engine import registry
from lab.runfolder import SAMPLE_RUNS, runs_dir, stamp
from lab.views.compare import (
    anatomy,
    chain,
    derived,
    groups,
    linkshare,
    margins,
    modes,
    picker,
    report,
    scaling,
    scaling_chart,
    why_tables,
)
from lab.views.compare import curves as compare_curves
from lab.views.compare import memory as compare_memory
from lab.views.compare import runs as compare_runs
from lab.views.compare import table as compare_table
from lab.views.compare.comparison import Comparison, choose_baseline, compare
from lab.views.runscalars import run_scalars
from ui import warm
from ui.gate import require_password
from ui.shared import event_reader


@st.cache_data(ttl=5, max_entries=4, show_spinner=False)
def _runs(user_root: str, sample_root: str) -> list[compare_runs.CompareRun]:
    user, samples = Path(user_root), Path(sample_root)
    # the registry reconciles the records with the processes; the view only reads them
    return compare_runs.available_runs(registry.list_runs(user), registry.list_runs(samples), user)


PICKED = "cmp_runs"  # the chosen runs' keys, kept across reruns


def _select(found: list[str]) -> None:
    st.session_state[PICKED] = list(found)


def _filters(runs: list[compare_runs.CompareRun], names: dict[str, str]) -> list[str]:
    """The regex and sweep filters and "Select all matching"; returns the matching keys."""
    c1, c2, c3 = st.columns([3, 3, 2], vertical_alignment="bottom")
    pattern = c1.text_input(
        "Filter runs (regex)", key="cmp_run_re", placeholder=r"e.g. ddp  or  ^sample-.*-r[12]$"
    )
    sweep = c2.selectbox(
        "Sweep",
        [picker.ALL, *picker.sweeps(runs)],
        format_func=lambda s: picker.sweep_label(s, runs),
        key="cmp_sweep",
    )
    found, err = picker.matching(runs, names, pattern, sweep)
    if err:
        st.error(err)
    c3.button(
        "Select all matching",
        key="cmp_select_matching",
        on_click=_select,
        args=(found,),
        disabled=not found,
        width="stretch",
    )
    return found


def _choose(runs: list[compare_runs.CompareRun], names: dict[str, str]) -> tuple[list, str] | None:
    """The chosen runs and the baseline's key, or None (with a hint) when none is chosen."""
    by_key = {r.key: r for r in runs}
    if PICKED in st.session_state:
        st.session_state[PICKED] = picker.kept(st.session_state[PICKED], list(by_key))
    else:
        st.session_state[PICKED] = compare_runs.default_selection(runs)
    found = _filters(runs, names)
    selected = st.session_state[PICKED]
    st.caption(picker.count_line(len(found), len(runs), len(selected)))
    keys = st.multiselect(
        "Runs",
        picker.offered(list(by_key), found, selected),
        format_func=lambda k: names[k],
        key=PICKED,
        help="Default: your newest sweep, else your newest 10 runs.",
    )
    if not keys:
        st.info("Choose at least one run above.")
        return None
    chosen = [by_key[k] for k in keys]
    base_default = choose_baseline(chosen)
    baseline = st.selectbox(
        "Baseline (speedup = 1): this run's group",
        keys,
        index=keys.index(base_default),
        format_func=lambda k: names[k],
        key="cmp_baseline",
        help=groups.BASELINE_HELP,
    )
    return chosen, baseline


def _table(table) -> None:
    formats = compare_table.column_formats(table.columns)
    config = {
        name: st.column_config.NumberColumn(name, format=col.format, help=col.help)
        for name, col in formats.items()
    }
    config |= {
        name: st.column_config.TextColumn(name, help=text)
        for name, text in compare_table.text_help(table.columns).items()
    }
    # the bare speedup and efficiency stay in the data (CSV, sorting); the page shows them with
    # their intervals
    shown = [c for c in table.columns if c not in ("speedup", "efficiency")]
    st.dataframe(
        compare_table.styled(table, {n: c.format for n, c in formats.items()}),
        hide_index=True,
        column_config=config,
        column_order=shown,
        key="cmp_table",
    )


def _speed_tags(chosen, scalars) -> tuple[str | None, str | None]:
    """The throughput and loss tag of the runs without summary.json; (None, None) when every run has
    one."""
    if derived.default_throughput(chosen, scalars) is None:
        return None, None
    col1, col2 = st.columns(2)
    options = derived.throughput_options({r.key: scalars[r.key] for r in chosen if not r.summary})
    tag = col1.selectbox(
        "Throughput of the runs without summary.json",
        options,
        format_func=derived.option_label,
        key="cmp_tp_tag",
        help="Their figures are derived: a tag they log, taken as samples/s, or "
        "steps/s (the step rate of the loss tag, against the baseline's).",
    )
    losses = derived.loss_options(scalars) or [derived.DEFAULT_LOSS]
    loss = col2.selectbox(
        "Loss tag (its step rate is steps/s)",
        losses,
        key="cmp_loss_tag",
        help="A run that does not log it uses its own first loss tag.",
    )
    return tag, loss


def _headline(c: Comparison) -> None:
    """The answer first: one ``st.metric`` per mode against the baseline."""
    if not c.headline:
        return
    st.caption(f"Against the baseline group, {c.baseline_text}:")
    for col, card in zip(st.columns(min(len(c.headline), 4)) * 8, c.headline[:32]):
        col.metric(
            f"{card.mode} on {card.devices} device{'s' * (card.devices != 1)}",
            card.value_text(),
            delta=card.delta_text(),  # beside the value, so neither is cut off
            delta_color={"faster": "green", "slower": "red"}.get(card.verdict, "gray"),
            delta_arrow={"faster": "up", "slower": "down"}.get(card.verdict, "off"),
            delta_description=card.verdict or None,
            help=card.reason,
        )
        col.caption(card.caption(modes.marker(card.mode)), unsafe_allow_html=True)


def _warnings(c: Comparison) -> None:
    """The warnings folded: one counting line, the details in one expander."""
    if not c.warnings:
        return
    st.warning(c.warning_summary, icon="⚠️")
    with st.expander("Details of the notes"):
        st.markdown("\n".join(f"- {w.message}" for w in c.warnings))


def _reading(c: Comparison) -> None:
    with st.expander("How to read this"):
        st.markdown("\n\n".join([compare_table.HOW_TO_READ, *c.notes]))
        st.markdown(scaling.HOW_TO_READ)
        if c.anatomy:
            st.markdown(f"**{anatomy.CAPTION}.** " + anatomy.INTRO)
            st.markdown("\n".join(f"- {line}" for line in c.anatomy))


def _traces(chosen, names: dict[str, str]) -> None:
    found = [(r, anatomy.trace_downloads(r.run_dir, r.run_id)) for r in chosen]
    found = [(r, files + anatomy.snapshot_downloads(r.run_dir, r.run_id)) for r, files in found]
    found = [(r, files) for r, files in found if files]
    if not found:
        return
    with st.expander(
        "Each rank's trace (open it in ui.perfetto.dev) and memory snapshot "
        f"(open it at {anatomy.SNAPSHOT_VIEWER})"
    ):
        for r, files in found:
            cols = st.columns(len(files) + 1)
            cols[0].markdown(f"**{names[r.key]}**")
            for col, (label, file_name, path) in zip(cols[1:], files):
                pickle = file_name.endswith(".pickle")
                col.download_button(
                    label,
                    lambda p=path: p.read_bytes(),
                    file_name=file_name,
                    mime="application/octet-stream" if pickle else "application/gzip",
                    on_click="ignore",
                    key=f"cmp_trace_{r.key}_{file_name}",
                    help=f"Open it at {anatomy.SNAPSHOT_VIEWER}" if pickle else None,
                )


def _anatomy(c: Comparison, names: dict[str, str]) -> list:
    """The anatomy bars and each rank's trace; returns the figures, for the export."""
    figures = compare_curves.anatomy_figures(c)
    if not figures:
        st.caption(
            "None of these runs was profiled: launch with Profile steps (e.g. 20:25) to see where "
            "the time "
            "of a step goes."
        )
        return []
    st.subheader(anatomy.CAPTION)
    st.plotly_chart(figures[0][1], key="cmp_anatomy")
    st.caption(anatomy.INTRO + " *How to read this*, above, reads them with these runs' numbers.")
    for line in linkshare.lines(c):  # the all-reduces against the latest `lab linkcheck`
        st.caption(f"{line}. {linkshare.WHY}")
    moved = why_tables.collectives_frame(c)
    if moved is not None:
        st.markdown(f"**{why_tables.COLLECTIVES_CAPTION}** — {why_tables.COLLECTIVES_INTRO}")
        st.dataframe(moved, hide_index=True, key="cmp_collectives")
    _traces(c.runs, names)
    return figures


def _repeats(c: Comparison) -> None:
    values = why_tables.by_value_frame(c)
    if values is not None:
        st.markdown(f"**{why_tables.BY_VALUE_CAPTION}** — against the first value")
        st.dataframe(values, hide_index=True, key="cmp_by_value")
    by_mode = compare_table.repeats_frame(c)
    if by_mode is not None:
        st.markdown(
            "**Repeats** — each mode's median throughput over its repeats, and the spread across "
            "them"
        )
        st.dataframe(by_mode, hide_index=True, key="cmp_repeats")


def _scaling(c: Comparison) -> list:
    """A device-count sweep: throughput and efficiency against the count, and the seeds' table."""
    shown = scaling_chart.figures(c)
    for i, (caption, fig) in enumerate(shown):
        st.subheader(caption)
        st.plotly_chart(fig, key=f"cmp_scaling_{i}")
    seeds = scaling_chart.table(c.scaling_curve)
    if seeds is not None:
        st.dataframe(seeds, hide_index=True, key="cmp_scaling_table")
    return [(caption, fig, None) for caption, fig in shown]


def _memory(chosen, names: dict[str, str]) -> list:
    table = compare_memory.frame(chosen, names)
    if table is not None:
        st.subheader(compare_memory.CAPTION)
        st.dataframe(table, hide_index=True, key="cmp_memory")
        st.caption(compare_memory.intro(chosen, names))
    trade = compare_memory.frontier_view(chosen)
    if trade is None:
        return []
    st.subheader(compare_memory.FRONTIER_CAPTION)
    st.plotly_chart(trade[0], key="cmp_frontier")
    st.caption(trade[1])
    return [(compare_memory.FRONTIER_CAPTION, trade[0], trade[1])]


def _joined(chosen, runs, scalars) -> dict:
    """Each chosen run's curves, joined to the runs it resumed from when the toggle asks
    (``lab.views.compare.chain``)."""
    by_id = {r.run_id: r.record for r in runs if not r.sample}
    back = {r.key: chain.ancestors(r.record, by_id) for r in chosen}
    if not any(back.values()) or not st.toggle(
        "Draw a resumed run with the runs it continues, as one curve",
        key="cmp_join",
        help="A run resumed from another's checkpoint "
        "continues its curve; the older points after the resume are left out.",
    ):
        return scalars
    return {
        k: chain.joined([run_scalars(event_reader(str(a.run_dir))) for a in back[k]] + [scalars[k]])
        for k in scalars
    }


def _figures(c: Comparison, scalars) -> list:
    col1, col2, col3 = st.columns(3)
    tag = col1.selectbox("Curve", compare_curves.curve_tags(scalars), key="cmp_tag")
    x = col2.radio(
        "Against",
        list(compare_curves.X_AXES),
        format_func=compare_curves.X_AXES.get,
        horizontal=True,
        key="cmp_x",
    )
    metric = col3.radio(
        "System",
        list(compare_curves.SYSTEM_METRICS),
        format_func=compare_curves.SYSTEM_METRICS.get,
        horizontal=True,
        key="cmp_sys",
    )
    st.caption(compare_curves.STEP_NOTE)
    figures = compare_curves.comparison_figures(c, scalars, tag=tag, x=x, metric=metric)
    for i, (caption, fig, note) in enumerate(figures):
        st.subheader(caption)
        if note and i > 0:  # the step note is already shown under the toggles
            st.info(note)
        st.plotly_chart(fig, key=f"cmp_fig_{i}")
    return figures


def _downloads(where, c: Comparison, table, figures) -> None:
    d1, d2 = where.columns(2)
    now = stamp()
    d1.download_button(
        "Download table (CSV)",
        compare_table.table_csv(table),
        file_name=f"compare-{now}.csv",
        mime="text/csv",
        on_click="ignore",
        key="cmp_csv",
    )
    d2.download_button(
        "Download comparison (standalone HTML)",
        # Built only on click: it embeds plotly.js (a few MB).
        lambda: report.build_html(c, figures),
        file_name=f"compare-{now}.html",
        mime="text/html",
        on_click="ignore",
        key="cmp_html",
    )


def main() -> None:
    st.set_page_config(page_title="Compare · Parallel Training Lab", page_icon="⚖️", layout="wide")
    require_password()
    st.title("Compare runs")
    runs = _runs(str(runs_dir()), str(SAMPLE_RUNS))
    if not runs:
        st.info(compare_runs.NO_RUNS)
        return
    names = compare_runs.labels(runs)
    if not any(not r.sample for r in runs):
        st.caption(compare_runs.SAMPLES_ONLY)
    picked = _choose(runs, names)
    if picked is None:
        return
    chosen, baseline = picked
    try:
        scalars = compare_runs.read_scalars(chosen, event_reader)
    except Exception as exc:  # a folder that vanished or cannot be read: say so, no traceback
        st.error(
            f"Could not read the runs' event files: {exc}. Check that the run folders still exist."
        )
        return
    tp_tag, loss_tag = _speed_tags(chosen, scalars)
    c = compare(chosen, baseline, scalars, tp_tag, loss_tag, margins.measured(runs_dir()))
    _headline(c)
    _warnings(c)
    table = compare_table.frame(c)
    _table(table)
    st.caption("  \n".join(c.provenance))
    _repeats(c)
    # filled at the end, once the figures exist, but shown under the table
    downloads = st.container()
    figures = _scaling(c)
    _reading(c)
    figures += _anatomy(c, names)
    figures += _memory(chosen, names)
    figures += _figures(c, _joined(chosen, runs, scalars))
    _downloads(downloads, c, table, figures)


main()
# Once this page is drawn, the other pages' imports load in the background (ui.warm).
warm.start()
