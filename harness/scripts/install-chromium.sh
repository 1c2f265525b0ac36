#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed, for the HTML report's
# browser check (`cargo test`) and its screenshot (`locklab report --screenshot`).
# Skipped when LOCKLAB_CHROMIUM names a binary or chromium is already on PATH;
# otherwise installs Debian's `chromium` package with apt-get (as root; running
# `apt-get update` first when the package lists are missing). Chromium pulls in
# too many shared libraries to unpack privately the way PgBouncer is.
#
# Used by the harness on first use (`locklab::browser::chromium`, unless
# LOCKLAB_NO_INSTALL=1) and by `just setup`. One installer at a time: several
# test processes may ask at once (a lock in .cache/), and apt-get waits for
# dpkg's own lock (another checkout, or an unrelated apt-get).
#
# usage: install-chromium.sh
set -euo pipefail

say() { echo "install-chromium: $*" >&2; }

found() {
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$name" >/dev/null 2>&1; then
      say "$name already installed ($(command -v "$name"))"
      return 0
    fi
  done
  return 1
}

if [ -n "${LOCKLAB_CHROMIUM:-}" ]; then
  say "using LOCKLAB_CHROMIUM=$LOCKLAB_CHROMIUM"
  exit 0
fi
found && exit 0
command -v apt-get >/dev/null 2>&1 || { say "no Chromium and no apt-get: install Chromium and set LOCKLAB_CHROMIUM"; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
  say "no Chromium: run 'sudo apt-get install chromium' (or set LOCKLAB_CHROMIUM)"
  exit 1
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$root/.cache"
exec 9>"$root/.cache/chromium.lock"
if ! flock -n 9; then
  say "another process is installing Chromium; waiting for it"
  flock 9
fi
found && exit 0

export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
  tail -20 "$log" >&2
  say "could not install Debian's chromium package"
  exit 1
}
apt=(apt-get -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends)
say "installing Debian's chromium package with apt-get (about 100 MB with its libraries)"
if ! "${apt[@]}" install chromium >"$log" 2>&1; then
  say "apt-get install failed; updating the package lists and trying again"
  apt-get -q -o DPkg::Lock::Timeout=600 update >>"$log" 2>&1 || fail
  "${apt[@]}" install chromium >>"$log" 2>&1 || fail
fi
say "installed $(chromium --version 2>/dev/null | head -1)"
