#!/usr/bin/env bash
# html-examples.sh: regenerates the example HTML report pages in docs/examples/ from the saved
# documents beside them (NAME.json -> NAME.html) with this checkout's build.
#
#   scripts/html-examples.sh
#
# cli/tests/html.rs renders the same documents and fails when a committed page differs, so run
# this after changing what a page shows, and commit the pages with the change.
set -euo pipefail
cd "$(dirname "$0")/.."
for json in docs/examples/*.json; do
    cargo run -q -p uringbench-cli --bin uringbench -- report "$json" --html "${json%.json}.html" >/dev/null
    echo "html-examples.sh: wrote ${json%.json}.html"
done
