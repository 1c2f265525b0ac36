#!/usr/bin/env bash
# Fuzzes the scenario parser and validator (harness/fuzz, target `scenario`)
# with cargo-fuzz / libFuzzer for SECONDS (default 600), seeded from
# scenarios/ and the invalid fixtures. Installs cargo-fuzz into .cache/tools
# on first use. cargo-fuzz passes nightly-only flags (-Zsanitizer, -Cpasses);
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
# Exit status: 0 when the time ran out without a finding, else libFuzzer's
# (the crashing input is then in harness/fuzz/artifacts/scenario/).
set -euo pipefail
seconds="${1:-600}"
case "$seconds" in
  ''|*[!0-9]*) echo "fuzz: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.."
root="$PWD"
tools="$root/.cache/tools"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz into .cache/tools (once)"
  cargo install --quiet --locked --root "$tools" cargo-fuzz
fi
export PATH="$tools/bin:$PATH"
export RUSTC_BOOTSTRAP=1
corpus="$root/harness/fuzz/corpus/scenario"
mkdir -p "$corpus"
# Seeds: every shipped scenario and every broken fixture (the corpus keeps
# what libFuzzer adds; it is not committed).
cp -f "$root"/scenarios/*.yaml "$root"/harness/tests/fixtures/invalid/*.yaml "$corpus"/
cd "$root/harness"
echo "fuzz: scenario::parse for ${seconds} s (libFuzzer; -max_len 65536, 10 s per input, 4 GiB)"
started=$(date +%s)
# -a: debug assertions and overflow checks on, as in `cargo test`.
cargo fuzz run --release -a scenario -- \
  -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
echo "fuzz: no finding in $(( $(date +%s) - started )) s"
