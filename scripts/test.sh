#!/usr/bin/env bash
# The whole test suite, from a fresh clone, inside the repo's own .venv built
# from requirements.txt and requirements-test.txt alone (scripts/venv.sh), so
# nothing installed by hand on the machine can make it pass. Chromium
# (Debian's package) is needed by the e2e tests; it is installed with apt-get
# when we are root and it is missing. Elsewhere the e2e tests are skipped
# with a reason, except under CI where a missing browser is an error. The
# same holds for Slurm (Debian's slurm-wlm and munge), which the slurm tests
# bring up as a private one-node cluster in a temp folder.
# Run without arguments, it then runs a second pass in the fake-GPU mode
# (tests/conftest.py): NVML fakes 4 GPUs in every process, torch keeps no
# CUDA, as a CPU test meets a GPU box; the tests that once broke there, and
# the fake-NVML tests, must pass in both modes (on two workers too: none of
# them is serial; 63 s against 89 s one at a time here).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh requirements.txt requirements-test.txt
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif [ "${CI:-}" = "true" ]; then
    echo "CI needs /usr/bin/chromium for the e2e tests: run as root or install Debian's chromium" >&2
    exit 1
  fi
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
  elif [ "${CI:-}" = "true" ]; then
    echo "CI needs Slurm for the slurm tests: run as root or install Debian's slurm-wlm and munge" >&2
    exit 1
  fi
fi
if [ $# -gt 0 ]; then
  exec "$PY" -m pytest "$@"
fi
"$PY" -m ruff check .
"$PY" -m ruff format --check .
# every test once, in two passes: every test not marked serial, on two pytest-xdist workers
# (--dist loadgroup keeps a module that shares one run, or every browser test, on one worker:
# tests/conftest.py) under coverage (the processes of tests/helpers/measured.py's modules too:
# pyproject.toml's [tool.coverage.run]); the tests that start no process run in the same pass, so
# the suite is collected once less (about 12 s of CPU per worker here); then the tests marked
# serial (a CPU measured, busy or quiet asserted, a deadline in seconds) one at a time with nothing
# beside them, without coverage (it made processes about 30% slower here, and what they run is
# measured by the pass before), collecting only the files that mark some (12 s less here than
# collecting all); then each package's line coverage against its floor
mapfile -t serial_files < <(grep -l "mark\.serial" tests/test_*.py)
"$PY" -m pytest --cov --cov-report= -n 2 --dist loadgroup -m "not serial"
"$PY" -m pytest -m "(proc or e2e or slurm or gpu) and serial" "${serial_files[@]}"
"$PY" scripts/coverage_by_package.py
FAKE_GPU_TESTS=(
  tests/test_devices.py tests/test_devices_limits.py tests/test_engine_cli.py tests/test_app_pages.py
  tests/test_engine_config.py tests/test_engine_request.py tests/test_cli_errors.py
  tests/test_engine_runs.py::test_bad_configs_are_refused_before_anything_starts
  tests/test_train_run.py::test_single_run_writes_every_tag_and_learns
  tests/test_train_run.py::test_single_run_summary_and_progress
  tests/test_train_ddp.py::test_ddp_two_ranks_finish_and_only_rank0_writes
  tests/test_train_ddp.py::test_ddp_memory_tags_of_both_ranks
  "tests/test_train_cli.py::test_bad_input_is_one_line_and_leaves_nothing[ddp_batch_not_divisible]"
  "tests/test_train_cli.py::test_bad_input_of_a_trainer_process_is_one_line_and_leaves_nothing[ddp_batch_not_divisible]"
)
echo "== fake-GPU mode (LAB_TEST_FAKE_GPUS=4): ${#FAKE_GPU_TESTS[@]} files and tests"
LAB_TEST_FAKE_GPUS=4 exec "$PY" -m pytest -q -n 2 --dist loadgroup "${FAKE_GPU_TESTS[@]}"
