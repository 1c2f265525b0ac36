#!/usr/bin/env bash
# Builds the Go adapter of the pgxpool column (drivers/adapters/go/pgxpool)
# from Debian's packages, pinned by drivers/adapters/go/pgxpool.pins: Go 1.25
# (trixie-backports; its `go` is statically linked, so it runs on bookworm
# too) and pgx v5 with its dependencies as Go source (sid's golang-*-dev
# packages), fetched with drivers/adapters/fetch-debs.sh and unpacked under
# <workspace>/.cache/go/ (nothing is installed system-wide). The adapter is
# built once, in GOPATH mode (no module proxy), and rebuilt when its source,
# this script or the pins change. Idempotent; a lock keeps two harness
# processes from installing at once.
#
# usage: install.sh
#   creates <workspace>/.cache/go/pgxpool/pgxpool-adapter
#
# Used by the harness on first use of the pgxpool column (drivers/adapters/adapters.yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
pins="$here/pgxpool.pins"
src="$here/pgxpool"
cache="$root/.cache/go"
dest="$cache/pgxpool"
bin="$dest/pgxpool-adapter"

say() { echo "install-go-adapter: $*" >&2; }
die() { say "$*"; exit 1; }

# What the build depends on: the pins, the adapter's source, this script.
stamp_of() { cat "$pins" "$src"/*.go "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
built() { [ -x "$bin" ] && [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$(stamp_of)" ]; }

[ -f "$pins" ] || die "no pins file $pins"
built && exit 0

mkdir -p "$cache"
exec 9>"$cache/pgxpool.lock"
flock 9
built && exit 0
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb is needed to unpack Debian's Go and pgx packages (Debian: apt-get install dpkg)"
command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to fetch Debian's Go and pgx packages (Debian: apt-get install apt)"

# 1. The packages, fetched and unpacked once per content of the pins file.
tree="$cache/tree"
pins_sum="$(grep -v '^[[:space:]]*\(#\|$\)' "$pins" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$tree/.pins" 2>/dev/null)" != "$pins_sum" ]; then
  rm -rf "$tree" "$cache/debs"
  mkdir -p "$cache/debs"
  for suite in $(grep -v '^[[:space:]]*\(#\|$\)' "$pins" | awk '{print $1}' | sort -u); do
    mapfile -t pkgs < <(grep -v '^[[:space:]]*\(#\|$\)' "$pins" | awk -v s="$suite" '$1 == s {print $2}')
    if ! bash "$root/drivers/adapters/fetch-debs.sh" "$suite" "$cache/debs" "${pkgs[@]}" 2>"$cache/fetch.log"; then
      cat "$cache/fetch.log" >&2
      die "cannot fetch ${pkgs[*]} from Debian $suite (a pinned version gone from the suite? then update $pins and the column's version)"
    fi
  done
  mkdir -p "$tree.new"
  for deb in "$cache"/debs/*.deb; do
    dpkg-deb -x "$deb" "$tree.new" || die "cannot unpack $deb"
  done
  mv "$tree.new" "$tree"
  grep -v '^[[:space:]]*\(#\|$\)' "$pins" | sha256sum | cut -d' ' -f1 >"$tree/.pins"
fi

goroot="$(find "$tree/usr/lib" -maxdepth 1 -name 'go-*' -type d | sort -V | tail -n 1)"
[ -n "$goroot" ] && [ -x "$goroot/bin/go" ] || die "no Go toolchain unpacked under $tree/usr/lib"
"$goroot/bin/go" version >/dev/null 2>&1 || die "$goroot/bin/go does not run on this machine"

# Debian version 5.9.2-1 -> 5.9.2 (for hello's version and details).
upstream() { dpkg-deb -f "$(ls "$cache"/debs/"$1"_*.deb | head -n 1)" Version | sed -e 's/^[0-9]*://' -e 's/-[^-]*$//'; }
pgx_version="$(upstream golang-github-jackc-pgx-v5-dev)"
puddle_version="$(upstream golang-github-jackc-puddle-v2-dev)"

# 2. The build: GOPATH mode over Debian's source tree, no network.
say "building the pgxpool adapter (pgx $pgx_version, puddle $puddle_version, $("$goroot/bin/go" version | awk '{print $3}')); this takes a minute or two the first time"
mkdir -p "$dest" "$cache/gocache"
rm -f "$bin" "$dest/.stamp"
if ! (cd "$src" && env GOROOT="$goroot" GOPATH="$tree/usr/share/gocode" GO111MODULE=off GOFLAGS= \
  GOPROXY=off GOTOOLCHAIN=local GOENV=off GOTELEMETRY=off CGO_ENABLED=0 GOCACHE="$cache/gocache" \
  "$goroot/bin/go" build -trimpath -o "$bin.new" \
  -ldflags "-X main.pgxVersion=$pgx_version -X main.puddleVersion=$puddle_version" .) >"$dest/build.log" 2>&1; then
  cat "$dest/build.log" >&2
  die "go build of $src failed (see above)"
fi
mv "$bin.new" "$bin"
stamp_of >"$dest/.stamp"
rm -f "$dest/build.log"
say "built $bin"
