#!/usr/bin/env bash
# The one-command demo: builds everything, then brings up 3 echo replicas
# behind the traffik load balancer on this host's Docker engine, with the
# embedded store. Nothing to configure.
#
#   examples/demo.sh
#
# It prints the URL and a curl line to try, and runs until Ctrl-C, which
# stops the controller (and with it traffik, which runs inside it). The
# replicas keep running; with a controller running again,
# `vd delete deployment/demo/web` removes them.
#
# Settings, all optional: VOODU_ROOT (default ~/.voodu-demo), DEMO_PORT
# (default 18084), DEMO_SCOPE (default demo), DEMO_IMAGE (default
# voodu-echo:latest).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"

echo "== building voodu, its sample plugins and the demo image"
cargo build --quiet -p vd -p voodu-traffik
examples/build-echo-image.sh "${DEMO_IMAGE:-voodu-echo:latest}"
# Where cargo put the build: $CARGO_TARGET_DIR when it is set.
built="${CARGO_TARGET_DIR:-$repo/target}/debug"
vd="$built/vd"

export VOODU_ROOT="${VOODU_ROOT:-$HOME/.voodu-demo}"
port="${DEMO_PORT:-18084}"
scope="${DEMO_SCOPE:-demo}"
mkdir -p "$VOODU_ROOT"
manifest="$VOODU_ROOT/demo.vd"
cat >"$manifest" <<HCL
deployment "$scope" "web" {
  image    = "${DEMO_IMAGE:-voodu-echo:latest}"
  replicas = 3
  ports    = ["8084"]

  probes {
    readiness {
      http_get { path = "/ready" }
      period = "500ms"
    }
  }

  traffik "http" {
    port = 8084
    bind = "127.0.0.1:$port"
  }
}
HCL

echo "== starting the controller on $VOODU_ROOT (its log: $VOODU_ROOT/controller.log)"
"$vd" controller >"$VOODU_ROOT/controller.log" 2>&1 &
controller=$!
trap 'kill "$controller" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  [ -S "$VOODU_ROOT/controller.sock" ] && break
  sleep 0.1
done
"$vd" plugins:install --replace "$built/libvoodu_traffik.so"
"$vd" apply -f "$manifest"

cat <<DONE

The demo is up: 3 replicas behind traffik at http://127.0.0.1:$port/
Try:   curl http://127.0.0.1:$port/     (each answer names the replica)
Then:  export PATH="$built:\$PATH" VOODU_ROOT="$VOODU_ROOT"
       vd get pods; vd logs deployment/$scope/web; vd describe deployment/$scope/web
Ctrl-C stops the controller (and traffik, which runs inside it); the
replicas keep running. To remove them, start the controller again
(vd controller &) and run: vd delete deployment/$scope/web
DONE
wait "$controller"
