"""The warm-up: every page's heavy imports, done once per server in the background.

Owns what is loaded ahead and when. A page's first visit after the server starts pays its
imports on top of its own work: pandas 0.55 s, the compare views 0.3 s, and plotly's figure
machinery on its first figure (its validators load lazily), which put Compare's first visit
over 3 s on this 2-core machine. Every page calls ``start()`` at the end of its script, once its
own screen is drawn (on 2 cores an import running beside a page's script slows it: Home's first
visit took ~0.7 s longer with the call at the top): one daemon thread, once per server, imports
those modules and builds one figure nobody sees, so the page visited next finds them loaded.
Python's per-module import locks make a page that needs a module mid-import wait for it rather
than load it twice. A failure is logged and changes nothing: the page imports what it needs.
"""

from __future__ import annotations

import importlib
import logging
import threading

import streamlit as st

log = logging.getLogger(__name__)

# What Live, Compare and Logs import beyond what Home has already loaded (measured with
# ``sys.modules`` before and after each page's first run), heaviest first.
MODULES = (
    "pandas",
    "pandas.io.formats.style",  # Compare's styled table: jinja2
    "plotly.graph_objects",
    "plotly.subplots",
    "plotly.colors",
    "lab.events",
    "lab.events.hparams",
    "lab.events.protobuf",  # TensorBoard's protos, for tensors and hparams
    "crc32c",
    "ui.shared",
    "lab.engine.linkcheck",
    "lab.views.downsample",
    "lab.views.smoothing",
    "lab.views.compare.comparison",
    "lab.views.compare.curves",
    "lab.views.compare.report",
    "lab.views.compare.scaling_chart",
    "lab.views.compare.why_tables",
    "lab.views.logs.browse",
    "lab.views.logs.folder",
    "lab.views.logs.scalar_chart",
    "lab.views.live.run_charts",
)


def _warm() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the page will import it itself, and say what is wrong
            log.exception("warm-up: importing %s", name)
    try:
        import plotly.graph_objects as go

        # Each trace type's validators load on first use: the kinds the pages draw.
        bar = go.Bar(x=["a"], y=[1], marker_color="#333", error_y={"type": "data", "array": [0.1]})
        fig = go.Figure([go.Scatter(x=[0, 1], y=[0, 1], mode="lines+markers"), bar])
        fig.update_layout(title="warm-up", xaxis_title="x", yaxis_title="y", hovermode="closest")
        fig.update_xaxes(title="x", tickvals=[0, 1])
        fig.update_yaxes(title="y", rangemode="tozero")
        fig.to_json()
    except Exception:
        log.exception("warm-up: building a figure")


@st.cache_resource(show_spinner=False)
def start() -> threading.Thread:
    """Start the warm-up once per server; later calls return the same thread."""
    t = threading.Thread(target=_warm, name="lab-warm-up", daemon=True)
    t.start()
    return t
