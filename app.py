"""The entry point (``streamlit run app.py``): the sidebar's pages, titled and in order.

Owns the navigation only: Home, Launch, Live, Compare, Logs, each a file under ``pages/``
(without this, Streamlit names the first entry after this script, "app"). Each page sets its own
title and passes the password gate itself, so a page run on its own (``AppTest.from_file``) is
the page a user sees; their URLs stay ``/``, ``/Launch``, ``/Live``, ``/Compare``, ``/Logs``.
"""

from __future__ import annotations

import streamlit as st

PAGES = [
    st.Page("pages/0_Home.py", title="Home", icon=":material/home:", default=True),
    st.Page("pages/1_Launch.py", title="Launch", icon=":material/rocket_launch:"),
    st.Page("pages/2_Live.py", title="Live", icon=":material/monitoring:"),
    st.Page("pages/3_Compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/4_Logs.py", title="Logs", icon=":material/stacked_line_chart:"),
]

st.navigation(PAGES).run()
