#!/usr/bin/env bash
# Installs PgBouncer from Debian's `pgbouncer` package (with the libc-ares2 and
# libevent it links against, which a minimal system may lack) into DEST, once,
# without installing anything into the system: the packages are downloaded with
# `apt-get download` and unpacked with `dpkg-deb -x`; nothing is started or
# registered. When the package lists are missing, root runs `apt-get update`
# first. The result is checked by running `pgbouncer --version`.
#
# usage: install-pgbouncer.sh [DEST]
#   DEST  install directory (default: <workspace>/.cache/pgbouncer)
#
# Used by the harness (when no pgbouncer is found) and by `just setup`.
# Afterwards DEST/bin/pgbouncer runs the binary with DEST's libraries.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="${1:-$root/.cache/pgbouncer}"

say() { echo "install-pgbouncer: $*" >&2; }

if [ -x "$dest/bin/pgbouncer" ]; then
  say "PgBouncer already in $dest"
  exit 0
fi
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -x "$dest/bin/pgbouncer" ]; then
  say "PgBouncer already in $dest"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || { say "apt-get is needed to fetch Debian's pgbouncer package"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# apt downloads as its sandbox user `_apt` when that user may write here.
if id _apt >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then chown _apt "$tmp"; fi

fetch() {
  (cd "$tmp" && apt-get download -q pgbouncer libc-ares2 libevent-2.1-7) >"$tmp/apt.log" 2>&1
}
say "downloading Debian's pgbouncer, libc-ares2 and libevent-2.1-7 packages"
if ! fetch; then
  say "apt-get download failed; updating the package lists and retrying"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -q >"$tmp/update.log" 2>&1 || { cat "$tmp/update.log" >&2; exit 1; }
  else
    say "(not root: cannot run apt-get update; run it as root, or set LOCKLAB_PGBOUNCER to a pgbouncer binary)"
  fi
  fetch || { cat "$tmp/apt.log" >&2; exit 1; }
fi

rm -rf "$dest.partial"
mkdir -p "$dest.partial/bin"
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$dest.partial/root"
done
cp -a "$dest.partial/root/usr/sbin/pgbouncer" "$dest.partial/bin/pgbouncer.real"
mkdir -p "$dest.partial/lib"
find "$dest.partial/root" \( -name 'libcares.so*' -o -name 'libevent-2.1.so*' \) -exec cp -a {} "$dest.partial/lib/" \;
rm -rf "$dest.partial/root"
cat >"$dest.partial/bin/pgbouncer" <<'WRAP'
#!/bin/sh
# Runs Debian's pgbouncer binary with the libraries unpacked next to it.
here="$(cd "$(dirname "$0")" && pwd)"
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/pgbouncer.real" "$@"
WRAP
chmod -R a+rX "$dest.partial"
chmod 755 "$dest.partial/bin/pgbouncer"
if ! version="$("$dest.partial/bin/pgbouncer" --version 2>&1 | head -n 1)" || [ -z "${version##*rror*}" ]; then
  say "the unpacked pgbouncer does not run: $version"
  LD_LIBRARY_PATH="$dest.partial/lib" ldd "$dest.partial/bin/pgbouncer.real" | grep 'not found' >&2 || true
  exit 1
fi
mv "$dest.partial" "$dest"
say "installed $version in $dest"
