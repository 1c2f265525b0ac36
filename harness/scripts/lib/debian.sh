# Shared by the image scripts (sourced; they define say and die first): the
# Debian mirror debootstrap uses, and debootstrap itself.

# The first Debian (non-security) mirror in this machine's apt configuration.
find_mirror() {
  if [ -n "${LOCKLAB_DEBIAN_MIRROR:-}" ]; then
    echo "$LOCKLAB_DEBIAN_MIRROR"
    return
  fi
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) if ($i ~ /debian/ && $i !~ /security/) { print $i; exit } }' "$f"
  done | head -n 1
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i ~ /debian/ && $i !~ /security/) print $i; break } }' "$f"
  done | head -n 1
}


# Installs debootstrap with apt-get when it is missing.
need_debootstrap() {
  command -v debootstrap >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "debootstrap is not installed and there is no apt-get to install it"
  say "installing debootstrap (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; } \
    || die "cannot install debootstrap with apt-get"
}
