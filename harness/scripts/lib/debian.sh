# Shared by the image scripts (sourced): the Debian mirror debootstrap uses.

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

