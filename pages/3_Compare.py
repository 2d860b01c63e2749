"""Compare page: finished runs side by side — table, fairness warnings, charts, exports.

Thin by design: it reads the widgets, asks ``lab.views.compare`` for the runs, the
table and the warnings and ``lab.views.report`` for the figures and the HTML export,
and draws them. Session keys carry the ``cmp_`` prefix.
"""
from __future__ import annotations

from datetime import datetime, timezone

import streamlit as st

from lab.views import compare, report
from lab.runfolder import SAMPLE_RUNS, runs_dir

CURVE_TAGS = ["train/loss", "val/loss", "train/acc", "val/acc"]
SYS_METRICS = {"util": "utilisation", "mem": "memory"}
FLOAT_COLUMNS = {
    "throughput (samples/s)": "%.1f", "speedup": "%.2f", "efficiency": "%.2f", "epoch time (s)": "%.2f",
    "memory imbalance": "%.3f", "final train loss": "%.4f", "final val loss": "%.4f", "final val acc": "%.4f",
}


@st.cache_resource(max_entries=64)
def _reader(path: str):
    # One incremental reader per run folder, kept across reruns: a refresh
    # reads only what was written since (the reader locks itself).
    from lab.events import LogdirReader

    return LogdirReader(path)


def _scalars(run: compare.CompareRun) -> dict:
    return compare.run_scalars(_reader(str(run.run_dir)))


@st.cache_data(ttl=5, max_entries=4, show_spinner=False)
def _runs(user_root: str, sample_root: str) -> list[compare.CompareRun]:
    from pathlib import Path

    return compare.available_runs(Path(user_root), Path(sample_root))


def main() -> None:
    st.set_page_config(page_title="Compare · Parallel Training Lab", page_icon="⚖️", layout="wide")
    st.title("Compare runs")
    runs = _runs(str(runs_dir()), str(SAMPLE_RUNS))
    if not runs:
        st.info("No runs to compare yet: launch a sweep on the Launch page (or restore sample_data/runs).")
        return
    by_key = {r.key: r for r in runs}
    names = compare.labels(runs)
    if not any(not r.sample for r in runs):
        st.caption("You have no runs of your own yet: showing the sample runs shipped in sample_data/runs.")

    keys = st.multiselect("Runs", list(by_key), default=compare.default_selection(runs),
                          format_func=lambda k: names[k], key="cmp_runs",
                          help="Default: your newest sweep.")
    if not keys:
        st.info("Choose at least one run above.")
        return
    chosen = [by_key[k] for k in keys]
    base_default = compare.choose_baseline(chosen)
    baseline = st.selectbox("Baseline (speedup = 1)", keys, index=keys.index(base_default),
                            format_func=lambda k: names[k], key="cmp_baseline")

    try:
        scalars = {r.key: _scalars(r) for r in chosen}
    except Exception as exc:  # a folder that vanished or cannot be read: say so, no traceback
        st.error(f"Could not read the runs' event files: {exc}. Check that the run folders still exist.")
        return

    warns = compare.fairness_warnings(chosen)
    for w in warns:
        st.warning(w.message, icon="⚠️")

    table = compare.compare_table(chosen, baseline_key=baseline, scalars=scalars)
    config = {c: st.column_config.NumberColumn(c, format=f) for c, f in FLOAT_COLUMNS.items()}
    config.update({c: st.column_config.NumberColumn(c, format="%.0f")
                   for c in table.columns if c.startswith(compare.PEAK_PREFIX)})
    config["loss matches baseline to step"] = st.column_config.NumberColumn(
        "loss matches baseline to step", format="%d",
        help="Last step up to which train/loss stays within 0.1% of the baseline's.")
    st.dataframe(table, hide_index=True, column_config=config, key="cmp_table")
    st.caption("  \n".join(compare.provenance(chosen)))
    downloads = st.container()  # filled at the end, once the figures exist, but shown under the table

    with st.expander("How to read this"):
        st.markdown(report.HOW_TO_READ)

    col1, col2, col3 = st.columns(3)
    tag = col1.selectbox("Curve", CURVE_TAGS, key="cmp_tag")
    x = col2.radio("Against", list(report.X_AXES), format_func=report.X_AXES.get,
                   horizontal=True, key="cmp_x")
    metric = col3.radio("System", list(SYS_METRICS), format_func=SYS_METRICS.get, horizontal=True, key="cmp_sys")
    st.caption(report.STEP_NOTE)

    figures = report.comparison_figures(chosen, table, scalars, tag=tag, x=x, metric=metric)
    for i, (caption, fig, note) in enumerate(figures):
        st.subheader(caption)
        if note and i > 0:  # the step note is already shown under the toggles
            st.info(note)
        st.plotly_chart(fig, key=f"cmp_fig_{i}")

    d1, d2 = downloads.columns(2)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    d1.download_button("Download table (CSV)", compare.table_csv(table), file_name=f"compare-{stamp}.csv",
                       mime="text/csv", on_click="ignore", key="cmp_csv")
    d2.download_button(
        "Download comparison (standalone HTML)",
        # Built only on click: it embeds plotly.js (a few MB).
        lambda: report.build_html(runs=chosen, table=table, warnings=warns, figures=figures,
                                  baseline_label=names[baseline]),
        file_name=f"compare-{stamp}.html", mime="text/html", on_click="ignore", key="cmp_html",
    )


main()
