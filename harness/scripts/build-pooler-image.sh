#!/usr/bin/env bash
# Builds the local pooler image for the pooler columns that run newer poolers
# than Debian 12 packages (PgBouncer 1.24, pgagroal 1.6, Pgpool-II 4.6, Odyssey
# 1.5): a Debian 13 "trixie" root filesystem made with debootstrap (minbase)
# plus Debian's `pgbouncer`, `pgagroal`, `pgpool2` and `socat` packages (socat
# forwards a four-digit port to the server for pgagroal 1.6, which crashes on
# five-digit ports), and Odyssey's binary unpacked from Debian sid's `odyssey`
# package (sid only; its libraries are all in trixie; unpacked, not installed:
# the package's maintainer scripts need systemd), then `docker import`.
# Trixie's binaries need a newer C library than Debian 12, hence a container.
# No registry is needed: everything comes from Debian's packages.
#
# usage: build-pooler-image.sh [TAG]
#   TAG  image tag (default locklab/poolers:trixie-2; the number goes up
#        whenever what the image holds changes, so that an older image is
#        not taken for it)
# env:
#   LOCKLAB_IMAGE_REBUILD=1  build even when TAG exists (default: skip)
#   LOCKLAB_DEBIAN_MIRROR    Debian mirror URL for debootstrap (default: the first
#                            non-security Debian source in this machine's apt config)
#
# Needs: root (debootstrap and chroot), a Docker engine, debootstrap (installed
# with apt-get when missing). The root filesystem is cached in .cache/rootfs/.
# The image's /usr/local/bin/pooler-versions prints one line per pooler.
set -euo pipefail

tag="${1:-locklab/poolers:trixie-2}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
suite=trixie
list="$root/harness/scripts/poolers.list"
# field N (1-based) of each line of poolers.list, trimmed.
list_field() { grep -v '^[[:space:]]*#' "$list" | awk -F'|' -v n="$1" -v s="${2:-}" 'NF >= 4 { for (i = 1; i <= NF; i++) gsub(/^[ \t]+|[ \t]+$/, "", $i); if (s == "" || $2 == s) print $n }'; }
packages="$(list_field 3 "$suite" | tr '\n' ' ' | sed 's/ *$//')"
sid_packages="$(list_field 3 sid | tr '\n' ' ' | sed 's/ *$//')"
[ -n "$packages" ] || { echo "build-pooler-image: error: no $suite packages in $list" >&2; exit 1; }
rootfs="$root/.cache/rootfs/$suite-poolers"

say() { echo "build-pooler-image: $*" >&2; }
die() { echo "build-pooler-image: error: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker command is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed); start it or check DOCKER_HOST"
exists() { docker image inspect "$tag" >/dev/null 2>&1; }
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists; then
  say "$tag already exists (LOCKLAB_IMAGE_REBUILD=1 rebuilds it)"
  exit 0
fi
mkdir -p "$root/.cache"
exec 9>"${TMPDIR:-/tmp}/locklab-$(id -u)-build-pooler-image.lock"
flock 9
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists; then
  say "$tag already exists"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap, chroot)"

# find_mirror and need_debootstrap.
. "$root/harness/scripts/lib/debian.sh"

log="$root/.cache/debootstrap-$suite.log"

# Installs $packages into root filesystem $1 with its own apt-get, and marks
# it complete for that package list.
install_packages() {
  if ! chroot "$1" /bin/sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $packages" >>"$log" 2>&1; then
    tail -n 15 "$log" >&2
    die "apt-get install $packages failed inside the $suite root (whole log in $log)"
  fi
  chroot "$1" apt-get clean >/dev/null 2>&1 || true
  rm -rf "$1/var/lib/apt/lists/"*
  echo "$packages" >"$1/.locklab-complete"
}

# A root filesystem made for an older package list gets the missing packages.
if [ -e "$rootfs/.locklab-complete" ] && [ "$(cat "$rootfs/.locklab-complete")" != "$packages" ]; then
  say "adding to .cache/rootfs/$suite-poolers: $packages"
  install_packages "$rootfs"
fi

if [ ! -e "$rootfs/.locklab-complete" ]; then
  need_debootstrap
  mirror="$(find_mirror | head -n 1)"
  [ -n "$mirror" ] || die "no Debian mirror found in the apt configuration; set LOCKLAB_DEBIAN_MIRROR"
  say "debootstrap $suite (minbase) into .cache/rootfs/$suite-poolers (a few minutes, once)"
  rm -rf "$rootfs.partial"
  mkdir -p "$(dirname "$rootfs")"
  if ! debootstrap --variant=minbase "$suite" "$rootfs.partial" "$mirror" >"$log" 2>&1; then
    tail -n 15 "$log" >&2
    die "debootstrap failed (whole log in $log)"
  fi
  say "installing $packages (Debian $suite) into it"
  # No service may start inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$rootfs.partial/usr/sbin/policy-rc.d"
  chmod 0755 "$rootfs.partial/usr/sbin/policy-rc.d"
  install_packages "$rootfs.partial"
  rm -rf "$rootfs"
  mv "$rootfs.partial" "$rootfs"
fi

staging="$(mktemp -d "$root/.cache/pooler-image-XXXXXX")"
debs="$(mktemp -d "$root/.cache/pooler-debs-XXXXXX")"
trap 'rm -rf "$staging" "$debs"' EXIT
cp -a "$rootfs/." "$staging/"
rm -f "$staging/.locklab-complete"
if [ -n "$sid_packages" ]; then
  say "unpacking Debian sid's $sid_packages"
  # shellcheck disable=SC2086
  bash "$root/drivers/adapters/fetch-debs.sh" sid "$debs" $sid_packages || die "cannot download Debian sid's $sid_packages"
  for p in $sid_packages; do dpkg-deb -x "$debs/${p}"_*.deb "$staging/"; done
fi
# The unprivileged user the poolers run as (PgBouncer and pgagroal refuse
# root), with a home under /tmp: pgagroal keeps its master key in
# ~/.pgagroal, and the harness's configuration is written at start-up.
echo 'locklab:x:998:998:locklab pooler:/tmp/locklab:/bin/sh' >>"$staging/etc/passwd"
echo 'locklab:x:998:' >>"$staging/etc/group"
echo 'locklab:*:19000:0:99999:7:::' >>"$staging/etc/shadow"
{
  echo '#!/bin/sh'
  echo '# One line per pooler: name and version, as the binaries print them.'
  list_field 1 | while read -r id; do
    version="$(grep -v '^[[:space:]]*#' "$list" | awk -F'|' -v id="$id" '{ gsub(/^[ \t]+|[ \t]+$/, "", $1); gsub(/^[ \t]+|[ \t]+$/, "", $4); if ($1 == id) print $4 }')"
    echo "echo \"${id%-trixie} \$($version 2>&1 | head -n 1)\""
  done
} >"$staging/usr/local/bin/pooler-versions"
chmod 0755 "$staging/usr/local/bin/pooler-versions"
versions="$(chroot "$staging" /usr/local/bin/pooler-versions)"
# Each pooler's binary runs in the root (a sid binary may miss a library):
# its version command is found and loads (some exit 1 after printing it).
list_field 4 | while read -r version; do
  status=0
  # shellcheck disable=SC2086
  out="$(chroot "$staging" $version 2>&1)" || status=$?
  if [ "$status" -ge 126 ] || [ -z "$out" ] || printf '%s' "$out" | grep -q 'error while loading shared libraries'; then
    echo "$out" >&2
    die "'$version' does not run in the $suite root (exit $status; a library missing?)"
  fi
done
say "versions: $(echo "$versions" | tr '\n' ';')"

say "importing $tag"
tar -C "$staging" --numeric-owner -c . | docker import \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV LANG=C.UTF-8" \
  --change "USER locklab" \
  --change "WORKDIR /tmp" \
  --change 'CMD ["/usr/local/bin/pooler-versions"]' \
  --message "locklab pooler image (Debian $suite minbase + $packages + sid $sid_packages)" \
  - "$tag" >/dev/null
say "built $tag"
