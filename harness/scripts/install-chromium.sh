#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed, for the HTML report's
# browser check (`cargo test`) and its screenshot (`locklab report --screenshot`).
# Skipped when LOCKLAB_CHROMIUM names a binary or chromium is already on PATH;
# otherwise installs Debian's `chromium` package with apt-get (as root; running
# `apt-get update` first when the package lists are missing). Chromium pulls in
# too many shared libraries to unpack privately the way PgBouncer is.
#
# usage: install-chromium.sh
set -euo pipefail

say() { echo "install-chromium: $*" >&2; }

if [ -n "${LOCKLAB_CHROMIUM:-}" ]; then
  say "using LOCKLAB_CHROMIUM=$LOCKLAB_CHROMIUM"
  exit 0
fi
for name in chromium chromium-browser google-chrome google-chrome-stable; do
  if command -v "$name" >/dev/null 2>&1; then
    say "$name already installed ($(command -v "$name"))"
    exit 0
  fi
done
command -v apt-get >/dev/null 2>&1 || { say "no Chromium and no apt-get: install Chromium and set LOCKLAB_CHROMIUM"; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
  say "no Chromium: run 'sudo apt-get install chromium' (or set LOCKLAB_CHROMIUM)"
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
fail() {
  tail -20 "$log" >&2
  say "could not install Debian's chromium package"
  exit 1
}
if ! apt-get install -y -q --no-install-recommends chromium >"$log" 2>&1; then
  say "apt-get install failed; updating the package lists and trying again"
  apt-get update -q >>"$log" 2>&1 || fail
  apt-get install -y -q --no-install-recommends chromium >>"$log" 2>&1 || fail
fi
say "installed $(chromium --version 2>/dev/null | head -1)"
