#!/usr/bin/env bash
# Installs PgBouncer from Debian's `pgbouncer` package (and the libc-ares2 it
# links against, which a minimal system may lack) into DEST, once, without
# touching the system: the packages are downloaded with `apt-get download` and
# unpacked with `dpkg-deb -x`; nothing is started or registered.
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
chmod 755 "$tmp"   # apt's download user must be able to write here

fetch() {
  (cd "$tmp" && apt-get download -q pgbouncer libc-ares2) >"$tmp/apt.log" 2>&1
}
say "downloading Debian's pgbouncer and libc-ares2 packages"
if ! fetch; then
  say "apt-get download failed; updating the package lists and retrying"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -q >"$tmp/update.log" 2>&1 || { cat "$tmp/update.log" >&2; exit 1; }
  fi
  fetch || { cat "$tmp/apt.log" >&2; exit 1; }
fi

rm -rf "$dest.partial"
mkdir -p "$dest.partial/bin"
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$dest.partial/root"
done
libdir="$(dirname "$(find "$dest.partial/root" -name 'libcares.so*' | head -n 1)")"
cp -a "$dest.partial/root/usr/sbin/pgbouncer" "$dest.partial/bin/pgbouncer.real"
mkdir -p "$dest.partial/lib"
cp -a "$libdir"/libcares.so* "$dest.partial/lib/"
rm -rf "$dest.partial/root"
cat >"$dest.partial/bin/pgbouncer" <<'WRAP'
#!/bin/sh
# Runs Debian's pgbouncer binary with the libraries unpacked next to it.
here="$(cd "$(dirname "$0")" && pwd)"
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/pgbouncer.real" "$@"
WRAP
chmod -R a+rX "$dest.partial"
chmod 755 "$dest.partial/bin/pgbouncer"
mv "$dest.partial" "$dest"
say "installed $("$dest/bin/pgbouncer" --version | head -n 1) in $dest"
