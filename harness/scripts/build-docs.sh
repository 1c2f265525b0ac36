#!/usr/bin/env bash
# Builds the book (docs/) with mdBook into target/book/html and checks every
# internal link (the mdbook-linkcheck2 backend: links between chapters, to
# their headings, and to the repository's files the chapters point at; web
# links are not fetched). Installs mdbook and mdbook-linkcheck2, at the
# versions below, into .cache/tools on first use (`cargo install --locked`).
# Exit status: mdbook's (1 on a broken link or a build error).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
tools="$root/.cache/tools"
mdbook_version=0.5.4
linkcheck_version=0.13.0
installed() { [ -x "$tools/bin/$1" ] && "$tools/bin/$1" --version 2>/dev/null | grep -q "$2"; }
if ! installed mdbook "$mdbook_version"; then
  echo "docs: installing mdbook $mdbook_version into .cache/tools (once, a few minutes)"
  cargo install --quiet --locked --root "$tools" mdbook --version "$mdbook_version"
fi
if ! installed mdbook-linkcheck2 "$linkcheck_version"; then
  echo "docs: installing mdbook-linkcheck2 $linkcheck_version into .cache/tools (once, a few minutes)"
  cargo install --quiet --locked --root "$tools" mdbook-linkcheck2 --version "$linkcheck_version"
fi
export PATH="$tools/bin:$PATH"
mdbook build docs
echo "docs: built target/book/html/index.html; no broken internal link"
