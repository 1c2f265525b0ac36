#!/usr/bin/env bash
# Reads a spec file of Debian packages, downloads them with fetch-debs.sh and
# unpacks them with dpkg-deb into a directory: the shared part of the Node and
# Ruby adapters' install scripts (each then checks the versions its own way).
#
# A spec file's lines:
#   suite SUITE          the Debian suite to download from
#   deb PACKAGE          a package to download and unpack (dependencies are
#                        not resolved: list each one the column needs)
#   expect NAME VERSION  a version the installer must find in the packages
#   # …                  a comment (blank lines too)
#
# usage: unpack-debs.sh SPEC DIR
#   makes DIR/root (the packages unpacked), DIR/debs.txt ("PACKAGE VERSION"
#   per package) and DIR/expects.txt ("NAME VERSION" per expect line).
#   Exit 1 with a message naming the spec or the package on any error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
spec="${1:?usage: unpack-debs.sh SPEC DIR}"
dir="${2:?usage: unpack-debs.sh SPEC DIR}"

say() { echo "unpack-debs: $*" >&2; }

[ -f "$spec" ] || { say "no spec file $spec"; exit 1; }
command -v dpkg-deb >/dev/null 2>&1 || { say "no dpkg-deb found: it unpacks the packages of $spec (Debian: apt-get install dpkg)"; exit 1; }

suite="" debs=() line=0
mkdir -p "$dir/debs" "$dir/root"
: >"$dir/expects.txt"
while read -r key a b; do
  line=$((line + 1))
  case "$key" in
    suite) suite="$a" ;;
    deb) debs+=("$a") ;;
    expect) echo "$a $b" >>"$dir/expects.txt" ;;
    ''|'#'*) ;;
    *) say "$spec:$line: unknown line '$key $a $b' (suite, deb, expect or #)"; exit 1 ;;
  esac
done <"$spec"
[ -n "$suite" ] && [ "${#debs[@]}" -gt 0 ] || { say "$spec names no suite or no package"; exit 1; }

bash "$here/fetch-debs.sh" "$suite" "$dir/debs" "${debs[@]}" || { say "cannot download ${debs[*]} from Debian $suite (see above)"; exit 1; }
: >"$dir/debs.txt"
for deb in "$dir"/debs/*.deb; do
  dpkg-deb -x "$deb" "$dir/root"
  echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version)" >>"$dir/debs.txt"
done
rm -rf "$dir/debs"
