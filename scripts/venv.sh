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
# uv installs the same pinned files as pip in about a third of the time here (a fresh venv: 32 s
# with an empty cache, 20 to 28 s with a warm one, against 98 s for pip, CPU-bound; the same `pip
# freeze` but for uv itself), so pip installs uv (pinned) and uv the requirements, from the
# indexes and local wheels that pip is configured with. Anything uv cannot do falls back to pip,
# which stays the reference. The editable install of the lab stays with pip (uv's differs).
UV_PIN="uv==0.13.9"
pip_install() {
  # pip warns about every local index folder that lacks a package; only real errors matter here
  "$PY" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "is neither a file nor a directory" >&2)
}
uv_args() {
  # pip's configuration (files and PIP_* variables) as uv's options: its extra indexes, local
  # wheel folders and constraints (the machine's cap on torch); each value a space-separated list
  local key value v
  while IFS= read -r line; do
    key="${line%%=*}"
    value="${line#*=}"
    value="${value#\'}"
    value="${value%\'}"
    for v in $value; do
      case "$key" in
        *.extra-index-url) printf '%s\n' --extra-index-url "$v" ;;
        *.index-url) printf '%s\n' --index-url "$v" ;;
        *.find-links) printf '%s\n' --find-links "$v" ;;
        *.constraint) printf '%s\n' --constraint "$v" ;;
      esac
    done
  done < <("$PY" -m pip config list 2>/dev/null)
}
req_args=()
for r in "$@"; do req_args+=(-r "$r"); done
installed=""
if [ "$("$PY" -m uv --version 2>/dev/null)" = "uv ${UV_PIN#uv==}" ] || pip_install "$UV_PIN"; then
  mapfile -t pip_config < <(uv_args)
  if "$PY" -m uv pip install -q --python "$PY" --index-strategy unsafe-best-match \
    --compile-bytecode "${pip_config[@]}" "${req_args[@]}"; then
    installed=1
  fi
fi
if [ -z "$installed" ]; then
  echo "uv could not install the requirements: pip installs them" >&2
  pip_install "${req_args[@]}"
fi
# the lab itself, editable and without dependencies (they are the pinned files above): `lab` then
# works from any folder once .venv is activated; done once per checkout of the venv
if ! (cd / && "$PY" -c 'import sys, lab; sys.exit(lab.__file__ != sys.argv[1])' "$PWD/lab/__init__.py") 2>/dev/null; then
  pip_install --no-deps -e .
fi
