#!/usr/bin/env bash
# The whole test suite, from a fresh clone, inside the repo's own .venv built
# from requirements.txt and requirements-test.txt alone (scripts/venv.sh), so
# nothing installed by hand on the machine can make it pass. Chromium
# (Debian's package) is needed by the e2e tests; it is installed with apt-get
# when we are root and it is missing. Elsewhere the e2e tests are skipped
# with a reason, except under CI where a missing browser is an error. The
# same holds for Slurm (Debian's slurm-wlm and munge), which the slurm tests
# bring up as a private one-node cluster in a temp folder.
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
exec "$PY" -m pytest "$@"
