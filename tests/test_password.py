"""The shared-server password: lab/engine/launch/password.py, ``python -m lab password``, the gate
every page passes (ui/gate.py) and the launch rule it opens (lab/engine/launch/access.py).

The hash is checked for real (a wrong password fails, a changed salt fails), the CLI runs as a
subprocess reading the password from its stdin (no terminal), and each page runs under AppTest with
``LAB_PASSWORD_HASH`` set: it shows only the password field until the right password is typed, a
wrong one shows nothing of the runs, and after login a script launches from a server listening on
0.0.0.0 without ``LAB_ALLOW_REMOTE_LAUNCH``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from lab.engine.launch.access import ALLOW_ENV, launch_access
from lab.engine.launch.password import (
    HASH_ENV,
    BadPasswordHash,
    configured_hash,
    failure_delay_s,
    make_hash,
    verify,
)

REPO = Path(__file__).resolve().parent.parent
PAGES = ["app.py", "pages/1_Launch.py", "pages/2_Live.py", "pages/3_Compare.py", "pages/4_Logs.py"]
FAST = make_hash("s3cret pass", iterations=1000)


def test_hash_is_salted_and_verifies_only_the_right_password():
    a, b = make_hash("hunter2", iterations=1000), make_hash("hunter2", iterations=1000)
    assert a != b and a.startswith("pbkdf2_sha256$1000$")  # a fresh salt each time
    assert verify("hunter2", a) and verify("hunter2", b)
    assert not verify("hunter3", a) and not verify("", a)
    scheme, it, salt, digest = a.split("$")
    other_salt = "00" * 16 if salt != "00" * 16 else "11" * 16
    assert not verify("hunter2", "$".join([scheme, it, other_salt, digest]))


def test_a_malformed_hash_is_one_clear_error_and_empty_means_none():
    assert configured_hash({}) is None and configured_hash({HASH_ENV: " "}) is None
    assert configured_hash({HASH_ENV: FAST}) == FAST
    with pytest.raises(BadPasswordHash, match="python -m lab password"):
        configured_hash({HASH_ENV: "hunter2"})


def test_failure_delay_grows_and_is_capped():
    assert failure_delay_s(0) == 0 and failure_delay_s(1) == 1 and failure_delay_s(2) == 2
    assert failure_delay_s(10) == 5


def test_the_hash_opens_launching_beyond_loopback():
    assert not launch_access("0.0.0.0", {}).allowed
    ok = launch_access("0.0.0.0", {HASH_ENV: FAST})
    assert ok.allowed and "asks for the password" in ok.message
    assert launch_access("127.0.0.1", {HASH_ENV: FAST}).message is None


def _cli(stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lab", "password"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        start_new_session=True,  # no controlling terminal: getpass reads stdin
    )


@pytest.mark.proc
def test_cli_prints_a_hash_that_verifies():
    out = _cli("correct horse\ncorrect horse\n")
    assert out.returncode == 0, out.stderr
    line = out.stdout.splitlines()[0]
    assert verify("correct horse", line) and not verify("correct hors", line)
    assert HASH_ENV in out.stdout


@pytest.mark.proc
def test_cli_refuses_two_different_passwords_in_one_line():
    out = _cli("one\ntwo\n")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: the two passwords differ")


@pytest.fixture
def listening_everywhere():
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        yield
    finally:
        st_config.set_option("server.address", before)


@pytest.fixture
def gated(runs_dir, monkeypatch):
    monkeypatch.setenv(HASH_ENV, FAST)
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    return runs_dir


def _only_the_gate(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert [t.label for t in at.text_input] == ["Password"]
    assert [b.label for b in at.button] == ["Sign in"]
    assert not at.dataframe and not at.warning and not at.metric and not at.markdown
    assert not at.selectbox and not at.radio and not at.multiselect


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_only_the_password_field(gated, page):
    at = AppTest.from_file(str(REPO / page), default_timeout=30)
    at.run()
    _only_the_gate(at)


def _sign_in(at: AppTest, password: str) -> None:
    at.text_input(key="gate_password").set_value(password)
    at.button[0].click().run()


@pytest.mark.proc
def test_wrong_password_shows_nothing_then_right_one_opens_and_launch_works(
    gated, listening_everywhere, tmp_path
):
    from lab.engine import registry
    from lab.engine.launch import launcher

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    at.switch_page("pages/1_Launch.py").run()
    _only_the_gate(at)
    t0 = time.monotonic()
    _sign_in(at, "not it")
    assert time.monotonic() - t0 >= 1.0  # the delay after a failure
    assert any("Wrong password" in e.value for e in at.error)
    assert [t.label for t in at.text_input] == ["Password"] and not at.radio
    _sign_in(at, "s3cret pass")
    assert not at.exception, at.exception
    assert any("asks for the password" in w.value for w in at.warning)
    script = tmp_path / "hi.py"
    script.write_text("print('hi')\n")
    at.radio(key="launch_kind").set_value("script").run()
    at.text_input(key="launch_script_path").set_value(str(script)).run()
    at.button(key="launch_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    run_id = at.session_state["launch_last"]
    assert launcher.wait(run_id, gated, 60) == "succeeded"
    assert registry.get_run(run_id, gated).kind == "script"


def test_a_malformed_hash_shows_one_error_and_nothing_else(runs_dir, monkeypatch):
    monkeypatch.setenv(HASH_ENV, "plain-text-password")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        f"{HASH_ENV} is not a password hash: make one with `python -m lab password`"
    ]
    assert not at.text_input and not at.dataframe
    assert os.environ[HASH_ENV] == "plain-text-password"
