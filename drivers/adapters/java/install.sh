#!/usr/bin/env bash
# Installs one Java adapter column: fetches the Debian packages pinned in
# drivers/adapters/java/NAME.debs (fetch-debs.sh: no Maven), unpacks their
# jars into <workspace>/.cache/java/NAME/lib, and compiles the adapter source
# against them into .cache/java/NAME/locklab-adapter.jar (its manifest puts
# lib/*.jar on the class path: `java -jar` runs it). Idempotent: a stamp of the
# pins, the source and this script decides whether anything is to be done; the
# jars are fetched again only when the pins change. A lock keeps two harness
# processes from installing the same column at once.
#
# usage: install.sh NAME      e.g. install.sh hikaricp
#
# Used by the harness on first use of a Java column (drivers/adapters/adapters.yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
name="${1:?usage: install.sh NAME (a pins file drivers/adapters/java/NAME.debs)}"
pins="$here/$name.debs"
dest="$root/.cache/java/$name"

say() { echo "install-java-adapter: $*" >&2; }

[ -f "$pins" ] || { say "no pins file $pins"; exit 1; }
src="$(awk '$1 == "src" { print $2 }' "$pins")"
[ -n "$src" ] && [ -f "$here/$src" ] || { say "$pins names no adapter source (src FILE) in $here"; exit 1; }
stamp() { cat "$pins" "$here/$src" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
want="$(stamp)"
if [ -f "$dest/locklab-adapter.jar" ] && [ "$(cat "$dest/.installed" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
for tool in java javac jar dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || {
    say "no $tool found: install a JDK 11 or newer (Debian: apt-get install default-jdk-headless) to run the Java columns"
    exit 1
  }
done
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [ -f "$dest/locklab-adapter.jar" ] && [ "$(cat "$dest/.installed" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
mkdir -p "$dest"
work="$(mktemp -d "$dest.tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The jars: fetched again only when the pins' deb/jar lines change.
libpins="$(grep -E '^(deb|jar) ' "$pins")"
if [ ! -d "$dest/lib" ] || [ "$(cat "$dest/lib/.pins" 2>/dev/null)" != "$libpins" ]; then
  suites="$(awk '$1 == "deb" { print $2 }' "$pins" | sort -u)"
  for suite in $suites; do
    # shellcheck disable=SC2046
    bash "$here/../fetch-debs.sh" "$suite" "$work/debs" \
      $(awk -v s="$suite" '$1 == "deb" && $2 == s { print $3 "=" $4 }' "$pins") \
      || { say "cannot fetch the Debian packages of $name from $suite (see above)"; exit 1; }
  done
  for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$work/root" || { say "cannot unpack $deb"; exit 1; }
  done
  mkdir -p "$work/lib"
  for jar in $(awk '$1 == "jar" { print $2 }' "$pins"); do
    [ -e "$work/root/usr/share/java/$jar" ] || { say "no /usr/share/java/$jar in the packages of $pins"; exit 1; }
    cp -L "$work/root/usr/share/java/$jar" "$work/lib/$jar"
  done
  printf '%s\n' "$libpins" >"$work/lib/.pins"
  rm -rf "$dest/lib"
  mv "$work/lib" "$dest/lib"
  say "unpacked $(awk '$1 == "deb" { printf "%s %s, ", $3, $4 }' "$pins" | sed 's/, $//') into $dest/lib"
fi

jars="$(awk '$1 == "jar" { print $2 }' "$pins")"
cp_list="$(for j in $jars; do printf '%s:' "$dest/lib/$j"; done)"
mkdir -p "$work/classes"
if ! javac --release 11 -nowarn -encoding UTF-8 -cp "${cp_list%:}" -d "$work/classes" "$here/$src" >"$work/javac.log" 2>&1; then
  cat "$work/javac.log" >&2
  say "javac could not compile $here/$src (see above)"
  exit 1
fi
main="$(basename "$src" .java)"
{
  echo "Main-Class: $main"
  echo "Class-Path: $(for j in $jars; do printf 'lib/%s ' "$j"; done | sed 's/ $//')"
} >"$work/manifest.txt"
jar --create --file "$work/locklab-adapter.jar" --manifest "$work/manifest.txt" -C "$work/classes" . \
  || { say "cannot build $dest/locklab-adapter.jar"; exit 1; }
mv -f "$work/locklab-adapter.jar" "$dest/locklab-adapter.jar"
echo "$want" >"$dest/.installed"
say "built $dest/locklab-adapter.jar"
