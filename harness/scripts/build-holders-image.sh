#!/usr/bin/env bash
# Builds the container image of `locklab-holders` (the advisory-lock holders
# CLI and Prometheus exporter; deploy/holders/Dockerfile) without a container
# registry:
#   1. the base image locklab/debian:bookworm: a Debian 12 "bookworm" root
#      filesystem made with debootstrap (minbase) plus `ca-certificates` (so
#      `sslrootcert=system` finds the platform's roots), slimmed (no manual
#      pages, message catalogues or documentation but the copyright files),
#      then `docker import`;
#      skipped when it exists (`docker rmi locklab/debian:bookworm` rebuilds it);
#   2. `cargo build --release --locked -p locklab-holders` on this machine;
#   3. `docker build` of deploy/holders/Dockerfile with a context holding only
#      the binary (never the repository).
# The binary is linked against this machine's C library (glibc), so the base
# must carry the same or a newer one: this machine runs Debian 12, as the base
# does (glibc 2.36). Building on a newer distribution needs a matching base
# (--build-arg BASE=…, see the Dockerfile).
#
# usage: build-holders-image.sh [TAG]
#   TAG  image tag (default locklab/holders:latest)
# env:
#   LOCKLAB_IMAGE_REBUILD=1  build even when TAG exists (default: skip); the
#                            base is still reused when it exists
#   LOCKLAB_DEBIAN_MIRROR    Debian mirror URL for debootstrap (default: the first
#                            non-security Debian source in this machine's apt config)
#
# Needs: a Docker engine, the Rust toolchain, and for the base only root
# (debootstrap) and debootstrap (installed with apt-get when missing). The root
# filesystem is cached in .cache/rootfs/bookworm-holders (not the one
# build-image.sh makes: that one carries the PostgreSQL libraries, ICU among
# them, which this image does not need).
# At the end it prints the image's size, the binary's size and `--version`.
set -euo pipefail

tag="${1:-locklab/holders:latest}"
base=locklab/debian:bookworm
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
suite=bookworm
packages="ca-certificates"
rootfs="$root/.cache/rootfs/$suite-holders"
dockerfile="$root/deploy/holders/Dockerfile"

say() { echo "build-holders-image: $*" >&2; }
die() { echo "build-holders-image: error: $*" >&2; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker command is not installed"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed); start it or check DOCKER_HOST"
exists() { docker image inspect "$1" >/dev/null 2>&1; }
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists "$tag"; then
  say "$tag already exists (LOCKLAB_IMAGE_REBUILD=1 rebuilds it)"
  exit 0
fi
mkdir -p "$root/.cache"
exec 9>"${TMPDIR:-/tmp}/locklab-$(id -u)-build-holders-image.lock"
flock 9
if [ -z "${LOCKLAB_IMAGE_REBUILD:-}" ] && exists "$tag"; then
  say "$tag already exists"
  exit 0
fi

# --- 1. the base image -------------------------------------------------------
if ! exists "$base"; then
  [ "$(id -u)" -eq 0 ] || die "building the base image $base needs root (debootstrap); or build it elsewhere and docker load it"
  # find_mirror and need_debootstrap.
  . "$root/harness/scripts/lib/debian.sh"
  if [ ! -e "$rootfs/.locklab-complete" ]; then
    need_debootstrap
    mirror="$(find_mirror | head -n 1)"
    [ -n "$mirror" ] || die "no Debian mirror found in the apt configuration; set LOCKLAB_DEBIAN_MIRROR"
    log="$root/.cache/debootstrap-$suite-holders.log"
    say "debootstrap $suite (minbase) with $packages into .cache/rootfs/$suite-holders (about a minute, once)"
    rm -rf "$rootfs.partial"
    mkdir -p "$(dirname "$rootfs")"
    # debootstrap installs --include's packages with their dependencies
    # (openssl), and ca-certificates' postinst writes /etc/ssl/certs.
    if ! debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.partial" "$mirror" >"$log" 2>&1; then
      tail -n 15 "$log" >&2
      die "debootstrap failed (whole log in $log)"
    fi
    [ -s "$rootfs.partial/etc/ssl/certs/ca-certificates.crt" ] \
      || die "debootstrap left no /etc/ssl/certs/ca-certificates.crt (whole log in $log)"
    rm -rf "$rootfs.partial/var/cache/apt/archives/"*.deb "$rootfs.partial/var/lib/apt/lists/"*
    # Slim, as Debian's own slim images: no manual pages, info pages or message
    # catalogues, and of the documentation only the copyright files (about
    # 45 MB of 137); dpkg's path-exclude keeps it so for packages added later.
    cat >"$rootfs.partial/etc/dpkg/dpkg.cfg.d/locklab-slim" <<'SLIM'
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
SLIM
    rm -rf "$rootfs.partial/usr/share/man/"* "$rootfs.partial/usr/share/info/"*
    find "$rootfs.partial/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
    find "$rootfs.partial/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
    find "$rootfs.partial/usr/share/doc" -mindepth 1 -depth -type d -empty -delete
    # debootstrap copies this machine's resolver and host name; the engine
    # mounts a container's own over them.
    : >"$rootfs.partial/etc/resolv.conf"
    : >"$rootfs.partial/etc/hostname"
    touch "$rootfs.partial/.locklab-complete"
    rm -rf "$rootfs"
    mv "$rootfs.partial" "$rootfs"
  fi
  debian="$(cat "$rootfs/etc/debian_version")"
  say "importing $base (Debian $debian minbase + $packages)"
  tar -C "$rootfs" --numeric-owner --exclude=./.locklab-complete -c . | docker import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change 'CMD ["/bin/bash"]' \
    --message "locklab Debian $debian base (debootstrap $suite minbase + $packages)" \
    - "$base" >/dev/null
fi

# --- 2. the binary -----------------------------------------------------------
say "cargo build --release --locked -p locklab-holders"
(cd "$root" && cargo build --release --locked -p locklab-holders)
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
binary="$target_dir/release/locklab-holders"
[ -x "$binary" ] || die "no binary at $binary after the build"
version="$("$binary" --version | awk '{print $2}')"

# --- 3. the image ------------------------------------------------------------
context="$(mktemp -d "${TMPDIR:-/tmp}/locklab-holders-context-XXXXXX")"
trap 'rm -rf "$context"' EXIT
cp "$binary" "$context/locklab-holders"
# The legacy builder when BuildKit's client (buildx) is missing: Docker CLIs
# from 23 on refuse `docker build` without it unless DOCKER_BUILDKIT=0.
if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi
say "docker build $tag (locklab-holders $version on $base; DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-default})"
log="$root/.cache/docker-build-holders.log"
if ! docker build --file "$dockerfile" --build-arg "BASE=$base" --build-arg "VERSION=$version" \
  --tag "$tag" "$context" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "docker build failed (whole log in $log)"
fi

image_size="$(docker image inspect -f '{{.Size}}' "$tag")"
binary_size="$(stat -c %s "$binary")"
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
say "built $tag"
echo "image $tag: $image_size bytes ($(mb "$image_size"))"
echo "binary locklab-holders: $binary_size bytes ($(mb "$binary_size"))"
echo "docker run --rm $tag --version: $(docker run --rm "$tag" --version)"
