#!/usr/bin/env bash
# Installs the Python packages of one adapter column set into a virtual
# environment of its own, from PyPI, pinned by drivers/adapters/python/NAME.txt
# (two asyncpg versions cannot share one environment). Idempotent; a lock
# keeps two harness processes from installing the same set at once.
#
# usage: install.sh NAME      e.g. install.sh asyncpg-0.31
#   creates <workspace>/.cache/python/NAME (override the Python with LOCKLAB_PYTHON)
#
# Used by the harness on first use of a Python column (drivers/adapters/adapters.yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
name="${1:?usage: install.sh NAME (a requirements file drivers/adapters/python/NAME.txt)}"
req="$here/$name.txt"
dest="$root/.cache/python/$name"
python="${LOCKLAB_PYTHON:-python3}"

say() { echo "install-python-adapter: $*" >&2; }

[ -f "$req" ] || { say "no requirements file $req"; exit 1; }
if [ -x "$dest/bin/python" ] && [ -f "$dest/.installed" ] && cmp -s "$req" "$dest/.installed"; then
  exit 0
fi
if ! command -v "$python" >/dev/null 2>&1; then
  say "no $python found: install Python 3 (3.9 or newer) with pip and venv (Debian: apt-get install python3 python3-venv) to run the Python columns"
  exit 1
fi
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -x "$dest/bin/python" ] && [ -f "$dest/.installed" ] && cmp -s "$req" "$dest/.installed"; then
  exit 0
fi
rm -rf "$dest"
say "creating $dest and installing $(tr '\n' ' ' <"$req")from PyPI"
if ! "$python" -m venv "$dest" >/dev/null 2>"$dest.log"; then
  rm -rf "$dest"
  say "$python cannot create a virtual environment: install pip and venv (Debian: apt-get install python3-venv); $(tail -1 "$dest.log")"
  exit 1
fi
if ! PIP_ROOT_USER_ACTION=ignore "$dest/bin/python" -m pip install --quiet --disable-pip-version-check \
  --only-binary=:all: -r "$req" >"$dest.log" 2>&1; then
  cat "$dest.log" >&2
  rm -rf "$dest"
  say "pip could not install $(tr '\n' ' ' <"$req")from PyPI (see above)"
  exit 1
fi
cp "$req" "$dest/.installed"
rm -f "$dest.log"
say "installed into $dest"
