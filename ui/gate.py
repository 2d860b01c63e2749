"""The password gate every page passes first, when ``LAB_PASSWORD_HASH`` is set.

``require_password()`` is called by each page right after ``st.set_page_config``:
without the hash it does nothing (the loopback/``LAB_ALLOW_REMOTE_LAUNCH`` rule
of ``lab.engine.launch.access`` stands); with it, a session that has not typed
the right password sees only a password field and the page stops there
(``st.stop``), so nothing of the runs is read or shown. A wrong password is
answered after a delay that doubles with each failure in a row
(``lab.engine.launch.password.failure_delay_s``). A hash that is not one
``python -m lab password`` printed shows one error naming the fix and nothing
else.
"""

from __future__ import annotations

import time

import streamlit as st

from lab.engine.launch.password import BadPasswordHash, configured_hash, failure_delay_s, verify

_OK, _FAILS = "gate_ok", "gate_failures"


def require_password() -> None:
    """Stop the page here unless no password is configured or this session typed it."""
    try:
        stored = configured_hash()
    except BadPasswordHash as e:
        st.error(str(e))
        st.stop()
    if stored is None or st.session_state.get(_OK):
        return
    st.title("Parallel Training Lab")
    with st.form("gate_form"):
        typed = st.text_input("Password", type="password", key="gate_password")
        sent = st.form_submit_button("Sign in")
    if sent and typed:
        if verify(typed, stored):
            st.session_state[_OK] = True
            st.session_state[_FAILS] = 0
            st.rerun()
        failures = int(st.session_state.get(_FAILS, 0)) + 1
        st.session_state[_FAILS] = failures
        time.sleep(failure_delay_s(failures))
        st.error("Wrong password.")
    st.stop()
