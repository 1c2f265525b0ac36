#!/usr/bin/env bash
# Installs Ruby 3.1, ActiveRecord and the pg gem for the ActiveRecord column,
# from Debian's packages (as listed in drivers/adapters/ruby/NAME.txt),
# downloaded and unpacked by drivers/adapters/unpack-debs.sh:
# nothing is installed system-wide, and neither gem nor bundler is used.
# Writes <workspace>/.cache/ruby/NAME/ruby, a launcher that runs the unpacked
# ruby with its libraries (LD_LIBRARY_PATH), its standard library (RUBYLIB)
# and Debian's gem specifications (GEM_PATH) found next to it.
# Idempotent (a stamp: the spec file and this script's hash); a lock keeps
# two harness processes from installing the same set at once.
#
# usage: install.sh NAME      e.g. install.sh activerecord-6.1
#   creates <workspace>/.cache/ruby/NAME
#
# Used by the harness on first use of the column (drivers/adapters/adapters.yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
name="${1:?usage: install.sh NAME (a spec file drivers/adapters/ruby/NAME.txt)}"
spec="$here/$name.txt"
dest="$root/.cache/ruby/$name"

say() { echo "install-ruby-adapter: $*" >&2; }

[ -f "$spec" ] || { say "no spec file $spec"; exit 1; }
stamp() { cat "$spec" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1; }
installed() { [ -x "$dest/ruby" ] && [ -f "$dest/.installed" ] && [ "$(cat "$dest/.installed")" = "$(stamp)" ]; }
installed && exit 0

mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
installed && exit 0

tmp="$dest.tmp"
rm -rf "$dest" "$tmp"
say "installing the packages of $spec into $dest"
bash "$root/drivers/adapters/unpack-debs.sh" "$spec" "$tmp/out" || { rm -rf "$tmp"; exit 1; }
ruby_bin="$(cd "$tmp/out/root/usr/bin" && ls ruby[0-9]* 2>/dev/null | head -n 1)"
[ -n "$ruby_bin" ] || { rm -rf "$tmp"; say "the packages hold no usr/bin/rubyX.Y"; exit 1; }
abi="$(ls "$tmp/out/root/usr/lib/ruby" | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | head -n 1)"
arch="$(ls "$tmp/out/root/usr/lib" | grep -E -- '-linux-gnu$' | head -n 1)"
[ -n "$abi" ] && [ -n "$arch" ] || { rm -rf "$tmp"; say "cannot find Ruby's library directories in the packages"; exit 1; }
# The launcher: paths relative to itself, so the checkout may move.
cat >"$tmp/out/ruby" <<LAUNCHER
#!/usr/bin/env bash
# Runs Debian's $ruby_bin unpacked next to this file (install.sh $name).
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
r="\$here/root/usr"
export LD_LIBRARY_PATH="\$r/lib/$arch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export RUBYLIB="\$r/lib/ruby/vendor_ruby:\$r/lib/$arch/ruby/vendor_ruby/$abi:\$r/lib/ruby/$abi:\$r/lib/$arch/ruby/$abi"
export GEM_PATH="\$r/share/rubygems-integration/all:\$r/share/rubygems-integration/$abi"
export GEM_HOME="\$here/gems"
exec "\$r/bin/$ruby_bin" "\$@"
LAUNCHER
chmod +x "$tmp/out/ruby"
while read -r gem want; do
  have="$("$tmp/out/ruby" -e 'print Gem::Specification.find_by_name(ARGV[0]).version.to_s rescue print "none"' "$gem" </dev/null)"
  if [ "$have" != "$want" ]; then
    rm -rf "$tmp"
    say "the packages of $spec hold $gem $have, not the pinned $want: update the spec (and the column's version)"
    exit 1
  fi
done <"$tmp/out/expects.txt"
rm "$tmp/out/expects.txt"
mv "$tmp/out" "$dest"
rm -rf "$tmp"
stamp >"$dest/.installed"
say "installed into $dest ($(paste -sd, "$dest/debs.txt" | sed 's/,/, /g'))"
