#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, then
# runs pytest. Chromium (Debian's package) is needed by the e2e tests; it is
# installed with apt-get when we are root and it is missing. Elsewhere the e2e
# tests are skipped with a reason, except under CI where a missing browser
# is an error.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -r requirements.txt -r requirements-test.txt
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif [ "${CI:-}" = "true" ]; then
    echo "CI needs /usr/bin/chromium for the e2e tests: run as root or install Debian's chromium" >&2
    exit 1
  fi
fi
exec python -m pytest "$@"
