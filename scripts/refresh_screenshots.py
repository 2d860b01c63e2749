"""Refresh the README's pictures from the running app: ``python scripts/refresh_screenshots.py``.

Starts ``streamlit run app.py`` on a free port with an empty private runs
folder (so the pages show the shipped sample runs), opens each page below in
Debian's Chromium and writes its screenshot into ``docs/``. The Logs page is
shown on a generated folder of 10 experiments x 30 runs with their
hyperparameters (tests/logs_fixtures.py), its runs chosen by a regex. The test suite
never runs this: tests must not write into tracked files. Run it by hand
after a change to a page the README shows, then commit the pictures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e_helpers import chromium_page, streamlit_server, wait_ready  # noqa: E402

LOGS_REGEX = r"^exp3/lr0\.1-"


def logs_on_experiments(page, tmp: Path) -> None:
    """The Logs page on 300 generated runs with hparams, the runs of exp3 at lr 0.1 chosen by
    regex."""
    from tests.logs_fixtures import make_experiments

    root = tmp / "experiments"
    make_experiments(root, experiments=10, points=300, hparams=True)
    page.locator('[data-testid="stRadio"] label', has_text="a folder I type").click()
    wait_ready(page)
    for label, text in (
        ("Path of a folder with event files (searched recursively)", str(root)),
        ("Filter runs (regex)", LOGS_REGEX),
    ):
        box = page.get_by_label(label)
        box.fill(text)
        box.press("Enter")
        wait_ready(page)
    page.get_by_text("10 of 300 runs match the filter").wait_for(timeout=60_000)
    page.get_by_role("button", name="Select all matching").click()
    page.get_by_text("10 selected, 10 drawn").wait_for(timeout=60_000)
    wait_ready(page)


# (page path, file under docs/, viewport height, what must be drawn before the shot, what to do
# first)
SHOTS = [
    ("Compare", "compare.png", 1700, '[data-testid="stPlotlyChart"] .main-svg', None),
    ("Logs", "logs.png", 2950, '[data-testid="stPlotlyChart"] .main-svg', logs_on_experiments),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, default=REPO / "docs", help="folder for the pictures (default: docs/)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        with streamlit_server(runs, Path(tmp)) as server, chromium_page(1400, 1000) as page:
            for path, name, height, drawn, prepare in SHOTS:
                page.set_viewport_size({"width": 1400, "height": height})
                page.goto(f"{server.url}/{path}")
                wait_ready(page)
                if prepare is not None:
                    prepare(page, Path(tmp))
                page.locator(drawn).nth(1).wait_for(state="attached", timeout=60_000)
                wait_ready(page)
                page.screenshot(path=str(args.out / name))
                print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
