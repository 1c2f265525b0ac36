#!/usr/bin/env bash
# Installs promtool, Prometheus's checker of configs and rules, from Debian's
# `prometheus` package into DEST, once, without installing the Prometheus
# service: the package is downloaded with `apt-get download` and unpacked with
# `dpkg-deb -x`; only usr/bin/promtool is kept, nothing is started or
# registered. When the download fails, root runs `apt-get update` and retries.
# The result is checked by running `promtool --version`.
#
# usage: install-promtool.sh [DEST]
#   DEST  install directory (default: <workspace>/.cache/promtool)
#
# Used by holders/tests/deploy.rs (when no promtool is found; unless
# LOCKLAB_NO_INSTALL=1), by `just promtool` and by .ci/run.
# Afterwards DEST/bin/promtool is the binary (a Go program needing only libc).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="${1:-$root/.cache/promtool}"

say() { echo "install-promtool: $*" >&2; }

if [ -x "$dest/bin/promtool" ]; then
  say "promtool already in $dest ($("$dest/bin/promtool" --version 2>&1 | head -n 1))"
  exit 0
fi
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -x "$dest/bin/promtool" ]; then
  say "promtool already in $dest"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 || { say "apt-get is needed to fetch Debian's prometheus package (or set LOCKLAB_PROMTOOL to a promtool binary)"; exit 1; }
command -v dpkg-deb >/dev/null 2>&1 || { say "dpkg-deb is needed to unpack Debian's prometheus package (or set LOCKLAB_PROMTOOL to a promtool binary)"; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# apt downloads as its sandbox user `_apt` when that user may write here.
if id _apt >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then chown _apt "$tmp"; fi

fetch() {
  (cd "$tmp" && apt-get download -q prometheus) >"$tmp/apt.log" 2>&1
}
say "downloading Debian's prometheus package (about 19 MB; only promtool is kept)"
if ! fetch; then
  say "apt-get download failed; updating the package lists and retrying"
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -q >"$tmp/update.log" 2>&1 || { cat "$tmp/update.log" >&2; exit 1; }
  else
    cat "$tmp/apt.log" >&2
    say "not root: cannot run apt-get update; run this script as root, or set LOCKLAB_PROMTOOL to a promtool binary"
    exit 1
  fi
  fetch || { cat "$tmp/apt.log" >&2; exit 1; }
fi

rm -rf "$dest.partial"
mkdir -p "$dest.partial/bin"
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
[ -f "$tmp/root/usr/bin/promtool" ] || { say "the prometheus package has no usr/bin/promtool"; exit 1; }
cp "$tmp/root/usr/bin/promtool" "$dest.partial/bin/promtool"
chmod -R a+rX "$dest.partial"
chmod 755 "$dest.partial/bin/promtool"
if ! version="$("$dest.partial/bin/promtool" --version 2>&1 | head -n 1)"; then
  say "the unpacked promtool does not run: $version"
  exit 1
fi
mv "$dest.partial" "$dest"
say "installed $version in $dest"
