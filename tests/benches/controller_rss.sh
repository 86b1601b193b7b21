#!/usr/bin/env bash
# The controller's resident memory with 3 plugins, 1,000 stored workloads
# and 3,000 published endpoints, read from /proc/PID/status (VmRSS, VmHWM).
#
#   tests/benches/controller_rss.sh          # release build; prints the figures, exits 1 above 64 MiB
#   PROFILE=debug tests/benches/controller_rss.sh
#
# 3,000 endpoints on a 2-core machine: 100 workloads run one replica each
# with 30 plugin blocks (10 of each plugin, told apart by labels), so every
# replica is published to 30 blocks; 900 more workloads are stored with
# replicas = 0. The controller holds all 1,000 and every published set.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"
profile="${PROFILE:-release}"
flag=""
[ "$profile" = release ] && flag="--release"
cargo build --quiet $flag -p vd -p voodu-echo -p voodu-echo-c -p voodu-fixture-recorder
image="voodu-rss-echo:latest"
examples/build-echo-image.sh "$image" >/dev/null
vd="$repo/target/$profile/vd"
root="$(mktemp -d)"
scope="rss$$"
calls="$root/calls.jsonl"
export VOODU_ROOT="$root"
cleanup() {
  kill "$controller" 2>/dev/null || true
  wait "$controller" 2>/dev/null || true
  docker ps -aq --filter "label=voodu.scope=$scope" | xargs -r docker rm -f >/dev/null
  docker image rm "$image" >/dev/null 2>&1 || true
  rm -rf "$root"
}
"$vd" controller --root "$root" >"$root/controller.log" 2>&1 &
controller=$!
trap cleanup EXIT
for _ in $(seq 1 100); do [ -S "$root/controller.sock" ] && break; sleep 0.1; done
"$vd" plugins:install "$repo/target/$profile/libvoodu_echo.so" >/dev/null
"$vd" plugins:install "$repo/target/$profile/libvoodu_echo_c.so" >/dev/null
"$vd" plugins:install "$repo/target/$profile/libvoodu_fixture_recorder.so" >/dev/null
manifest="$root/all.vd"
{
  for n in $(seq 0 999); do
    replicas=0
    [ "$n" -lt 100 ] && replicas=1
    echo "deployment \"$scope\" \"w$n\" {"
    echo "  image = \"$image\""
    echo "  replicas = $replicas"
    echo "  ports = [\"8084\"]"
    for b in $(seq 0 9); do
      echo "  echo \"e$b\" { greeting = \"hi\" }"
      echo "  echo_c \"c$b\" { greeting = \"ho\" }"
      echo "  recorder \"r$b\" { file = \"$calls\" }"
    done
    echo "}"
  done
} >"$manifest"
"$vd" apply -f "$manifest" >/dev/null 2>&1
# Let publishes settle.
sleep 12
published=$(python3 - "$calls" <<'PY'
import json, sys
last = {}
for line in open(sys.argv[1]):
    call = json.loads(line)
    if call["call"] == "publish":
        r = call["request"]
        last[(r["name"], tuple(r["block"].get("labels", [])))] = len(r["endpoints"])
print(sum(last.values()) * 3)  # the recorder sees a third of the blocks
PY
)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$controller/status")
hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$controller/status")
stored=$("$vd" get workloads -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["workloads"]))')
echo "$profile controller with 3 plugins, $stored stored workloads, $published published endpoints: VmRSS $((rss / 1024)) MiB, VmHWM $((hwm / 1024)) MiB (target < 64 MiB)"
if [ "$stored" -ne 1000 ] || [ "$published" -ne 3000 ]; then
  echo "the figure does not count: expected 1000 stored workloads and 3000 published endpoints"
  exit 1
fi
[ "$rss" -lt $((64 * 1024)) ]
