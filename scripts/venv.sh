# Sourced by scripts/start.sh and scripts/test.sh: make sure the repo's own
# virtual environment (.venv) exists, is isolated from the machine's
# packages, and holds the pinned requirements named in "$@". Sets $PY to its
# Python. A package installed by hand elsewhere on the machine can never
# satisfy an import here: the venv has no system site-packages.
# shellcheck shell=bash
VENV="${LAB_VENV:-.venv}"
if [ -f "$VENV/pyvenv.cfg" ] && grep -qi '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
  echo "error: $VENV sees the system's packages (--system-site-packages): remove it (rm -rf $VENV) and run again" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  BASE_PY="$(command -v python3 || command -v python || true)"
  if [ -z "$BASE_PY" ]; then
    echo "error: no python3 found: install Python 3.11 or newer and run again" >&2
    exit 2
  fi
  if ! "$BASE_PY" -m venv "$VENV"; then
    echo "error: could not create $VENV: install the venv module (Debian: apt-get install python3-venv) and run again" >&2
    exit 2
  fi
fi
PY="$VENV/bin/python"
req_args=()
for r in "$@"; do req_args+=(-r "$r"); done
# pip warns about every local index folder that lacks a package; only real errors matter here
"$PY" -m pip install -q --disable-pip-version-check "${req_args[@]}" 2> >(grep -v "is neither a file nor a directory" >&2)
# the lab itself, editable and without dependencies (they are the pinned files above): `lab` then
# works from any folder once .venv is activated; done once per checkout of the venv
if ! (cd / && "$PY" -c 'import sys, lab; sys.exit(lab.__file__ != sys.argv[1])' "$PWD/lab/__init__.py") 2>/dev/null; then
  "$PY" -m pip install -q --disable-pip-version-check --no-deps -e . 2> >(grep -v "is neither a file nor a directory" >&2)
fi
