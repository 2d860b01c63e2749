"""lab/engine/launch/access.py, and the pages that obey it: who may launch from the dashboard.

The rule is a pure function of the server's address and the environment;
the pages read the address from Streamlit's own config (``server.address``),
so the app tests set that option as ``--server.address 0.0.0.0`` would and
check both sides: refused (Home warns, Launch and "Compare modes" start
nothing) and allowed with ``LAB_ALLOW_REMOTE_LAUNCH=1`` (a real script run
starts from the Launch page).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from lab.engine.launch.access import ALLOW_ENV, is_loopback, launch_access

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "127.0.1.1", "localhost", "::1", "[::1]", " LOCALHOST "]
)
def test_loopback_may_launch_and_says_nothing(address):
    assert is_loopback(address)
    assert launch_access(address, {}) == launch_access(address, {ALLOW_ENV: "0"})
    assert launch_access(address, {}).allowed and launch_access(address, {}).message is None


@pytest.mark.parametrize(
    "address,where",
    [
        ("0.0.0.0", "0.0.0.0"),
        ("192.168.1.5", "192.168.1.5"),
        ("::", "::"),
        (None, "every network interface"),
        ("", "every network interface"),
    ],
)
def test_any_other_address_is_refused_unless_allowed(address, where):
    no = launch_access(address, {})
    assert not no.allowed
    assert f"listens on {where}" in no.message and "--server.address 127.0.0.1" in no.message
    assert f"{ALLOW_ENV}=1" in no.message
    assert not launch_access(address, {ALLOW_ENV: "yes"}).allowed  # only "1" opens it
    yes = launch_access(address, {ALLOW_ENV: "1"})
    assert yes.allowed and "anyone who can reach this page can launch runs" in yes.message


@pytest.fixture
def listening_everywhere():
    """Streamlit's server.address as ``--server.address 0.0.0.0`` sets it, restored afterwards."""
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "0.0.0.0")
    try:
        yield
    finally:
        st_config.set_option("server.address", before)


def _app(page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, at.exception
    return at


def test_the_shipped_config_listens_on_loopback_so_pages_launch(runs_dir):
    at = _app()
    assert st_config.get_option("server.address") == "127.0.0.1"  # .streamlit/config.toml
    assert not [w for w in at.warning if "Launching from the page is off" in w.value]


def test_refused_everywhere_when_listening_beyond_this_machine(
    runs_dir, listening_everywhere, monkeypatch, tmp_path
):
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    at = _app()
    assert any(
        "Launching from the page is off: this server listens on 0.0.0.0" in w.value
        for w in at.warning
    )
    at.button(key="home_compare").click().run()
    assert any("Not started: Launching from the page is off" in e.value for e in at.error)
    at.switch_page("pages/1_Launch.py").run()
    assert any("Launching from the page is off" in w.value for w in at.warning)
    at.button(key="launch_go").click().run()  # the trainer's default config: valid, but refused
    assert any("Not launched: Launching from the page is off" in e.value for e in at.error)
    at.radio(key="launch_kind").set_value("script").run()
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    at.text_input(key="launch_script_path").set_value(str(script)).run()
    assert not at.error
    at.button(key="launch_go").click().run()
    assert any("Not launched: Launching from the page is off" in e.value for e in at.error)
    assert not at.success and list(runs_dir.iterdir()) == []  # nothing was created, nothing started


@pytest.mark.proc
def test_allowed_with_the_variable_and_a_script_starts(
    runs_dir, listening_everywhere, monkeypatch, tmp_path
):
    from lab.engine import registry
    from lab.engine.launch import launcher

    monkeypatch.setenv(ALLOW_ENV, "1")
    at = _app("pages/1_Launch.py")
    assert any("anyone who can reach this page can launch runs" in w.value for w in at.warning)
    script = tmp_path / "hello.py"
    script.write_text("print('hello from a script')\n")
    at.radio(key="launch_kind").set_value("script").run()
    at.text_input(key="launch_script_path").set_value(str(script)).run()
    at.button(key="launch_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    run_id = at.session_state["launch_last"]
    assert launcher.wait(run_id, runs_dir, 60) == "succeeded"
    rec = registry.get_run(run_id, runs_dir)
    # default: the script's folder
    assert rec.kind == "script" and rec.config["cwd"] == str(tmp_path)
    deadline = time.monotonic() + 5
    while "hello from a script" not in (runs_dir / run_id / "stdout.log").read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
