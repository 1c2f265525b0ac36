#!/usr/bin/env bash
# Installs node-postgres (pg, with its bundled pg-pool) for the Node adapter
# column, from Debian's packages (node-pg and the dependencies it does not
# bundle, as listed in drivers/adapters/node/NAME.txt), downloaded and
# unpacked by drivers/adapters/unpack-debs.sh: nothing is
# installed system-wide and npm is not used. Debian's /usr/share/nodejs becomes
# <workspace>/.cache/node/NAME/node_modules, so that pg's own require('pg-pool')
# etc. resolve by Node's ordinary node_modules lookup (no NODE_PATH needed).
# Idempotent (a stamp: the spec file copied to .installed); a lock keeps two
# harness processes from installing the same set at once.
#
# usage: install.sh NAME      e.g. install.sh pg-8.14
#   creates <workspace>/.cache/node/NAME
#
# Used by the harness on first use of the Node column (drivers/adapters/adapters.yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
name="${1:?usage: install.sh NAME (a spec file drivers/adapters/node/NAME.txt)}"
spec="$here/$name.txt"
dest="$root/.cache/node/$name"

say() { echo "install-node-adapter: $*" >&2; }

[ -f "$spec" ] || { say "no spec file $spec"; exit 1; }
installed() { [ -f "$dest/.installed" ] && cmp -s "$spec" "$dest/.installed"; }
installed && exit 0

command -v node >/dev/null 2>&1 || { say "no node found: install Node.js (Debian: apt-get install nodejs) to run the Node column"; exit 1; }
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
installed && exit 0

tmp="$dest.tmp"
rm -rf "$dest" "$tmp"
say "installing the packages of $spec into $dest"
bash "$root/drivers/adapters/unpack-debs.sh" "$spec" "$tmp" || { rm -rf "$tmp"; exit 1; }
[ -d "$tmp/root/usr/share/nodejs" ] || { rm -rf "$tmp"; say "the packages hold no usr/share/nodejs"; exit 1; }
mkdir -p "$tmp/out"
mv "$tmp/root/usr/share/nodejs" "$tmp/out/node_modules"
mv "$tmp/root/usr/share/doc" "$tmp/out/doc" 2>/dev/null || true
mv "$tmp/debs.txt" "$tmp/out/debs.txt"
while read -r mod want; do
  have="$(node -p "require(process.argv[1]).version" "$tmp/out/node_modules/$mod/package.json" </dev/null 2>/dev/null || echo none)"
  if [ "$have" != "$want" ]; then
    rm -rf "$tmp"
    say "the packages of $spec hold $mod $have, not the pinned $want: update the spec (and the column's version)"
    exit 1
  fi
done <"$tmp/expects.txt"
mv "$tmp/out" "$dest"
rm -rf "$tmp"
cp "$spec" "$dest/.installed"
say "installed into $dest ($(paste -sd, "$dest/debs.txt" | sed 's/,/, /g'))"
