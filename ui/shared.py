"""What several pages need from Streamlit: the cached event readers and the grid of line charts.

One ``lab.events.LogdirReader`` per folder, kept by ``st.cache_resource`` for every page, session
and rerun (the Live and Compare pages read a run folder and a script's linked folders, each with its
own reader, as ``lab.views.runscalars.folder_scalars`` does; the Logs page any folder of event
files): a refresh then reads only what was written since the last one. ``chart_grid`` draws
``lab.views`` chart specs two to a row, as the Live and Logs pages show them."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from lab.events import LogdirReader
from lab.events.hparams import HparamsReader
from lab.views import charts, text
from lab.views.logs.folder import LogFolder
from lab.views.text import ChartSpec


@st.cache_resource(max_entries=64, show_spinner=False)
def event_reader(path: str) -> LogdirReader:
    """The one incremental reader of the event files under ``path``, shared by all pages.

    The reader locks itself, so sessions may share it.
    """
    return LogdirReader(path)


@st.cache_resource(max_entries=64, show_spinner=False)
def hparams_reader(path: str) -> HparamsReader:
    """The Logs page's incremental reader of the hyperparameters (hparams plugin records) under
    ``path``.

    Kept like ``event_reader``: one per folder, shared by sessions (it locks itself).
    """
    return HparamsReader(path)


@st.cache_resource(max_entries=16, show_spinner=False)
def log_folder(path: str) -> LogFolder:
    """The Logs page's view of the folder ``path``: its run listing and readers, kept for every
    session and rerun, so a rerun lists only what changed and reads only what was appended.

    It locks itself, so sessions may share it.
    """
    return LogFolder(path, hparams_reader(path))


def chart_grid(specs: Sequence[ChartSpec], key: str, *, titles_above: bool = False) -> None:
    """The charts two to a row; ``titles_above`` puts each title over its figure (long legends cover
    it)."""
    cols = st.columns(2)
    for i, spec in enumerate(specs):
        with cols[i % 2]:
            if titles_above:
                st.markdown(f"**{text.md_escape(spec.title)}**")
            fig = charts.spec_figure(spec, title=not titles_above)
            st.plotly_chart(fig, key=f"{key}_{spec.title}", width="stretch")
