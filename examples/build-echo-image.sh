#!/usr/bin/env bash
# Builds the echo-server (tests/echo-server) as a static binary and imports
# it into Docker as the image voodu-echo:latest, the whole root filesystem
# being that one binary. No registry is needed.
#
#   examples/build-echo-image.sh [TAG]
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-voodu-echo:latest}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
target="$(rustc -vV | sed -n 's/^host: //p')"
rustc --edition 2021 -O -C target-feature=+crt-static --target "$target" \
  tests/echo-server/src/main.rs -o "$work/echo-server"
tar -C "$work" -c echo-server |
  docker import --change 'ENTRYPOINT ["/echo-server"]' - "$tag" >/dev/null
echo "built $tag"
