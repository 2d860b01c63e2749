"""Refresh the README's pictures from the running app: ``python scripts/refresh_screenshots.py``.

Starts ``streamlit run app.py`` on a free port with an empty private runs
folder (so the pages show the shipped sample runs), opens each page below in
Debian's Chromium and writes its screenshot into ``docs/``. The test suite
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

# (page path, file under docs/, viewport height, what must be drawn before the shot)
SHOTS = [
    ("Compare", "compare.png", 1700, '[data-testid="stPlotlyChart"] .main-svg'),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs", help="folder for the pictures (default: docs/)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        runs.mkdir()
        with streamlit_server(runs, Path(tmp)) as server, chromium_page(1400, 1000) as page:
            for path, name, height, drawn in SHOTS:
                page.set_viewport_size({"width": 1400, "height": height})
                page.goto(f"{server.url}/{path}")
                wait_ready(page)
                page.locator(drawn).nth(1).wait_for(state="attached", timeout=60_000)
                wait_ready(page)
                page.screenshot(path=str(args.out / name))
                print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
