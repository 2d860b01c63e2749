#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): on a machine with NVIDIA GPUs, runs
# the gpu-marked tests, records single/DP/DDP resnet18 --amp runs into
# sample_data/runs-gpu/<label>/, checks Stop of a running DDP job and prints
# one line per run. Where there is no GPU it exits 1 with one line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh requirements.txt requirements-test.txt
exec "$PY" scripts/gpu_check.py "$@"
