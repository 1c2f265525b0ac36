#!/usr/bin/env bash
# Downloads Debian packages of one suite (bookworm, trixie, trixie-backports,
# sid, …) into a directory, without touching the host's apt configuration:
# a private apt state (sources list, package lists, cache) under
# <workspace>/.cache/apt/SUITE holds that suite's index, refreshed when older
# than a day. Nothing is installed; unpack the results with `dpkg-deb -x`.
# Works as root or not (apt's sandbox user is not needed: the state is ours).
#
# usage: fetch-debs.sh SUITE DEST PACKAGE…      e.g. fetch-debs.sh trixie /tmp/x node-pg
#   The mirror is the host's first Debian mirror (or LOCKLAB_DEBIAN_MIRROR);
#   the archive's keys come from /usr/share/keyrings/debian-archive-keyring.gpg.
#   Exit 1 with apt's message when a package or the mirror cannot be reached.
#
# Used by the install scripts of the Java and Go adapter columns, and by
# unpack-debs.sh (the Node and Ruby columns).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
suite="${1:?usage: fetch-debs.sh SUITE DEST PACKAGE…}"
dest="${2:?usage: fetch-debs.sh SUITE DEST PACKAGE…}"
shift 2
[ "$#" -gt 0 ] || { echo "fetch-debs: no package named" >&2; exit 1; }

say() { echo "fetch-debs: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=../../harness/scripts/lib/debian.sh
. "$root/harness/scripts/lib/debian.sh"

command -v apt-get >/dev/null 2>&1 || die "apt-get is needed to fetch Debian's packages ($*)"
mirror="$(find_mirror)"
[ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "no $keyring: install Debian's debian-archive-keyring package"

state="$root/.cache/apt/$suite"
mkdir -p "$state/lists/partial" "$state/archives/partial" "$state/etc/preferences.d" "$state/etc/apt.conf.d" "$dest"
echo "deb [signed-by=$keyring] $mirror $suite main" >"$state/etc/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$state/etc/sources.list"
  -o "Dir::Etc::SourceParts=-"
  -o "Dir::Etc::Preferences=$state/etc/preferences"
  -o "Dir::Etc::PreferencesParts=$state/etc/preferences.d"
  -o "Dir::State::Lists=$state/lists"
  -o "Dir::State::Status=$state/status"
  -o "Dir::Cache=$state/cache"
  -o "Dir::Cache::Archives=$state/archives"
  -o "APT::Sandbox::User=$(id -un)"
  -o "Debug::NoLocking=1"
  -o "Acquire::Languages=none"
)
touch "$state/status"

exec 9>"$state.lock"
flock 9
if [ -z "$(find "$state/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 2>/dev/null | head -n 1)" ]; then
  say "reading Debian $suite's package index ($mirror)"
  if ! apt-get "${apt_opts[@]}" update -q >"$state/update.log" 2>&1; then
    cat "$state/update.log" >&2
    die "cannot read Debian $suite's package index from $mirror"
  fi
fi
say "downloading $* from Debian $suite"
if ! (cd "$dest" && apt-get "${apt_opts[@]}" download -q "$@") >"$state/download.log" 2>&1; then
  cat "$state/download.log" >&2
  die "cannot download $* from Debian $suite"
fi
