"""The real app for browser tests: ``streamlit run app.py`` on a free port in
its own process group with a private LAB_RUNS_DIR, ended with SIGTERM then
SIGKILL; Debian's Chromium driven by Playwright's sync API (never a browser
downloaded by ``playwright install``); and the wait for "connected and the
script idle" read from the attributes Streamlit 1.67 puts on its app root
(``data-test-connection-state``, ``data-test-script-state``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The app root carries these once the websocket is up and no script run is in
# flight; fragments on a timer flip the script state briefly, which is why the
# wait is for this selector rather than a fixed sleep.
READY = (
    '[data-testid="stApp"][data-test-connection-state="CONNECTED"]'
    '[data-test-script-state="notRunning"]'
)


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log: Path
    runs_dir: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)  # polling the health endpoint, not waiting on the UI
    raise TimeoutError(f"streamlit not healthy after {timeout_s}s:\n{log.read_text()[-3000:]}")


def stop_group(proc: subprocess.Popen, grace_s: float = 10) -> None:
    """SIGTERM to the server's process group, SIGKILL after ``grace_s``."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def group_members(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return out


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``text`` (e.g. a runs folder)."""
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info.get("environ") or {}
            if text in cmd or text in env.get("LAB_RUNS_DIR", ""):
                if p.pid != os.getpid():
                    out.append(p)
        except psutil.Error:
            continue
    return out


@contextmanager
def streamlit_server(
    runs_dir: Path, log_dir: Path, address: str = "127.0.0.1", env: dict | None = None
):
    """The app on a free port, LAB_RUNS_DIR=runs_dir, listening on ``address``, with ``env``
    added to the environment; nothing of it survives the block."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "streamlit.log"
    env = dict(os.environ, LAB_RUNS_DIR=str(runs_dir), PYTHONUNBUFFERED="1", **(env or {}))
    # The server, and the runs it starts, are not measured by coverage (scripts/test.sh): the
    # pages' code is measured in-process by AppTest and the runs' by the proc tests, while
    # coverage in a process made real runs here about 30% slower (68 s against 53 s).
    env.pop("COVERAGE_PROCESS_CONFIG", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.port",
                str(port),
                "--server.headless",
                "true",
                "--server.address",
                address,
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield Server(url, proc, log, runs_dir)
    finally:
        stop_group(proc)
        left = group_members(proc.pid)
        for p in left:
            p.kill()
        assert not left, f"left behind in the server's group: {left}"


@contextmanager
def chromium_page(width: int = 1400, height: int = 1000):
    """A Playwright page in Debian's Chromium; browser closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


def wait_ready(page, timeout_ms: int = 60_000) -> None:
    """Until the app is connected and no script run is in flight."""
    page.wait_for_selector(READY, timeout=timeout_ms, state="attached")
