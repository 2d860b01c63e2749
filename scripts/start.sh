#!/usr/bin/env bash
# The dashboard from a fresh clone: builds/uses .venv from requirements.txt
# (no install into the system Python, which PEP 668 distributions refuse),
# then `streamlit run app.py`. Extra arguments go to streamlit, e.g.
# `bash scripts/start.sh --server.port 8600`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh requirements.txt
echo "the lab's command line, in any shell: source $PWD/.venv/bin/activate, then lab --help" >&2
exec "$PY" -m streamlit run app.py "$@"
