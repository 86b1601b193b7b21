#!/usr/bin/env bash
# Hosts on one machine: each host is a network namespace with an address of
# its own on a bridge of the rig's own, and, when asked, a Docker engine of
# its own. voodu's cluster tests stand on it, and an operator can try a
# three-host cluster with it (README, "Three hosts on one machine").
#
#   rig.sh up HOST...              hosts with their own engine (as root)
#   rig.sh up-bare HOST...         hosts without an engine (etcd members)
#   rig.sh addr HOST               the host's address
#   rig.sh exec HOST CMD...        CMD in the host's network, DOCKER_HOST
#                                  set to its engine
#   rig.sh load HOST IMAGE         copies IMAGE from this machine's engine
#   rig.sh import HOST TAR NAME [CHANGE...]
#                                  docker import of TAR into the host's engine
#   rig.sh cut HOST | heal HOST    the host's link down (packets vanish, as
#                                  with a dead machine) / up again
#   rig.sh partition HOST          drops every packet between the host and
#                                  the rest of the rig | unpartition HOST
#   rig.sh freeze HOST | thaw HOST SIGSTOP / SIGCONT every process in the
#                                  host, its containers paused first
#   rig.sh kill HOST               link down, then its containers, its
#                                  engine and every process in it, killed
#   rig.sh down                    everything the rig made, gone
#   rig.sh status                  the hosts, addresses and engines
#
# RIG_ID (1 to 250, default 1) names the rig and picks its range,
# 10.77.RIG_ID.0/24 (the bridge is .1, the hosts .10, .11, ... in the
# order they were made); RIG_DIR (default /tmp/voodu-rig-RIG_ID) holds
# each host's engine data, sockets and logs. Two rigs of other ids never
# touch each other. Traffic goes only to the rig's own addresses.
set -euo pipefail

RIG_ID="${RIG_ID:-1}"
RIG_DIR="${RIG_DIR:-/tmp/voodu-rig-$RIG_ID}"
if ! [[ "$RIG_ID" =~ ^[0-9]+$ ]] || [ "$RIG_ID" -lt 1 ] || [ "$RIG_ID" -gt 250 ]; then
  echo "rig.sh: RIG_ID must be 1 to 250, not $RIG_ID" >&2
  exit 2
fi
BRIDGE="vdrig$RIG_ID"
SUBNET="10.77.$RIG_ID"

die() { echo "rig.sh: $*" >&2; exit 1; }
netns() { echo "vdrig$RIG_ID-$1"; }
hostdir() { echo "$RIG_DIR/hosts/$1"; }
socket() { echo "$(hostdir "$1")/docker.sock"; }
in_host() {
  local host="$1"; shift
  [ -e "/var/run/netns/$(netns "$host")" ] || die "no host $host in rig $RIG_ID (rig.sh up $host)"
  # nsenter --net only: `ip netns exec` would remount /sys, and an engine
  # started under it loses its cgroups.
  nsenter --net="/var/run/netns/$(netns "$host")" "$@"
}
host_docker() {
  local host="$1"; shift
  DOCKER_HOST="unix://$(socket "$host")" docker "$@"
}
has_engine() { [ -S "$(socket "$1")" ]; }

ensure_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
  fi
  # A machine that runs Docker filters bridged packets through FORWARD,
  # whose policy Docker sets to DROP: let the rig's own through.
  iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  mkdir -p "$RIG_DIR/hosts"
}

# The next free address of the rig, kept with the host.
make_host() {
  local host="$1" ns index
  ns="$(netns "$host")"
  [[ "$host" =~ ^[a-z0-9]{1,8}$ ]] || die "a host name is 1 to 8 of a-z and 0-9, not $host"
  if [ -e "/var/run/netns/$ns" ]; then
    return 0
  fi
  index=$(( $(ls "$RIG_DIR/hosts" | wc -l) + 10 ))
  [ "$index" -lt 250 ] || die "rig $RIG_ID is full"
  mkdir -p "$(hostdir "$host")"
  echo "$SUBNET.$index" >"$(hostdir "$host")/address"
  ip netns add "$ns"
  ip link add "$ns" type veth peer name eth0 netns "$ns"
  ip link set "$ns" master "$BRIDGE" up
  ip -n "$ns" addr add "$SUBNET.$index/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
}

start_engine() {
  local host="$1" dir
  dir="$(hostdir "$host")"
  has_engine "$host" && return 0
  # A killed host's engine left its runtime state behind, with the pid of
  # its containerd (a zombie nobody reaps, which a new engine would wait
  # for): the exec root holds nothing else worth keeping.
  # Its containers' network namespaces are still mounted there.
  awk -v dir="$dir/exec" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts | sort -r |
    while read -r mount; do umount -l "$mount" 2>/dev/null || true; done
  rm -rf "$dir/exec"
  mkdir -p "$dir/data" "$dir/exec"
  # An empty configuration: the machine's /etc/docker/daemon.json names
  # its own data-root, which two engines cannot share.
  echo '{}' >"$dir/daemon.json"
  local driver
  driver="$(docker info --format '{{.Driver}}' 2>/dev/null || echo overlay2)"
  in_host "$host" setsid dockerd \
    --config-file "$dir/daemon.json" \
    --data-root "$dir/data" --exec-root "$dir/exec" \
    --host "unix://$dir/docker.sock" --pidfile "$dir/docker.pid" \
    --storage-driver "$driver" \
    --bip "10.78.$RIG_ID.1/24" \
    </dev/null >"$dir/dockerd.log" 2>&1 &
}

wait_engine() {
  local host="$1"
  for _ in $(seq 1 300); do
    host_docker "$host" info >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  tail -20 "$(hostdir "$host")/dockerd.log" >&2
  die "the engine of host $host did not answer within 30 s"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "the rig makes namespaces and links: run it as root"
  ensure_bridge
  local host
  for host in "$@"; do make_host "$host"; done
  # The engines start side by side: each takes a few seconds.
  for host in "$@"; do start_engine "$host"; done
  for host in "$@"; do wait_engine "$host"; done
}

up_bare() {
  [ "$(id -u)" -eq 0 ] || die "the rig makes namespaces and links: run it as root"
  ensure_bridge
  local host
  for host in "$@"; do make_host "$host"; done
}

# Every process whose network is the host's.
host_pids() { ip netns pids "$(netns "$1")" 2>/dev/null || true; }

containers_of() { has_engine "$1" && host_docker "$1" ps -q 2>/dev/null || true; }

kill_host() {
  local host="$1" pids
  ip link set "$(netns "$host")" down 2>/dev/null || true
  if has_engine "$host"; then
    # Its containers die with it, as on a machine switched off.
    containers_of "$host" | xargs -r timeout 20 env DOCKER_HOST="unix://$(socket "$host")" docker kill >/dev/null 2>&1 || true
  fi
  pids="$(host_pids "$host")"
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  # Containerd's shims live in the host's network too; anything left of
  # the engine goes by its files.
  if [ -f "$(hostdir "$host")/docker.pid" ]; then
    kill -KILL "$(cat "$(hostdir "$host")/docker.pid")" 2>/dev/null || true
  fi
  rm -f "$(socket "$host")"
}

freeze() {
  local host="$1" container pids
  for container in $(containers_of "$host"); do
    host_docker "$host" pause "$container" >/dev/null 2>&1 || true
  done
  pids="$(host_pids "$host")"
  [ -z "$pids" ] || kill -STOP $pids
}

thaw() {
  local host="$1" pids container
  pids="$(host_pids "$host")"
  [ -z "$pids" ] || kill -CONT $pids
  for container in $(host_docker "$host" ps -q --filter status=paused 2>/dev/null || true); do
    host_docker "$host" unpause "$container" >/dev/null 2>&1 || true
  done
}

# Every packet in or out of the host's link dropped, the link up: the host
# sees no error, only silence (a published port's packets are forwarded,
# not delivered, so the filter sits before routing and after it).
partition() {
  local host="$1"
  in_host "$host" iptables -t raw -I PREROUTING -i eth0 -j DROP
  in_host "$host" iptables -t mangle -I POSTROUTING -o eth0 -j DROP
}

unpartition() {
  local host="$1"
  while in_host "$host" iptables -t raw -D PREROUTING -i eth0 -j DROP 2>/dev/null; do :; done
  while in_host "$host" iptables -t mangle -D POSTROUTING -o eth0 -j DROP 2>/dev/null; do :; done
}

down() {
  local host
  if [ -d "$RIG_DIR/hosts" ]; then
    for host in $(ls "$RIG_DIR/hosts"); do
      [ -e "/var/run/netns/$(netns "$host")" ] || continue
      thaw "$host" 2>/dev/null || true
      if has_engine "$host"; then
        containers_of "$host" | xargs -r timeout 30 env DOCKER_HOST="unix://$(socket "$host")" docker rm -f >/dev/null 2>&1 || true
      fi
      kill_host "$host"
    done
    # The engines' mounts (their data-root, each container's layers) live
    # in this machine's mount namespace.
    for _ in 1 2 3; do
      mounts="$(awk -v dir="$RIG_DIR" 'index($2, dir) == 1 { print $2 }' /proc/self/mounts | sort -r)"
      [ -z "$mounts" ] && break
      for mount in $mounts; do umount -l "$mount" 2>/dev/null || true; done
      sleep 0.2
    done
    for host in $(ls "$RIG_DIR/hosts"); do
      ip netns del "$(netns "$host")" 2>/dev/null || true
      ip link del "$(netns "$host")" 2>/dev/null || true
    done
  fi
  iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
  rm -rf "$RIG_DIR"
}

status() {
  local host
  [ -d "$RIG_DIR/hosts" ] || { echo "rig $RIG_ID: no hosts"; return 0; }
  for host in $(ls "$RIG_DIR/hosts"); do
    local engine="no engine"
    has_engine "$host" && engine="engine at unix://$(socket "$host")"
    echo "$host $(cat "$(hostdir "$host")/address") $engine"
  done
}

command="${1:-}"
[ -n "$command" ] || { sed -n '2,30p' "$0"; exit 2; }
shift
case "$command" in
  up) [ "$#" -gt 0 ] || die "up HOST..."; up "$@" ;;
  up-bare) [ "$#" -gt 0 ] || die "up-bare HOST..."; up_bare "$@" ;;
  addr) cat "$(hostdir "${1:?addr HOST}")/address" 2>/dev/null || die "no host ${1} in rig $RIG_ID" ;;
  exec)
    host="${1:?exec HOST CMD...}"; shift
    DOCKER_HOST="unix://$(socket "$host")" in_host "$host" "$@"
    ;;
  load)
    host="${1:?load HOST IMAGE}"; image="${2:?load HOST IMAGE}"
    docker save "$image" | host_docker "$host" load -q >/dev/null
    ;;
  import)
    host="${1:?import HOST TAR NAME}"; tar="${2:?import HOST TAR NAME}"; name="${3:?import HOST TAR NAME}"; shift 3
    changes=()
    for change in "$@"; do changes+=(--change "$change"); done
    host_docker "$host" import "${changes[@]}" "$tar" "$name" >/dev/null
    ;;
  cut) ip link set "$(netns "${1:?cut HOST}")" down ;;
  heal) ip link set "$(netns "${1:?heal HOST}")" up ;;
  partition) partition "${1:?partition HOST}" ;;
  unpartition) unpartition "${1:?unpartition HOST}" ;;
  freeze) freeze "${1:?freeze HOST}" ;;
  thaw) thaw "${1:?thaw HOST}" ;;
  kill) kill_host "${1:?kill HOST}" ;;
  down) down ;;
  status) status ;;
  *) die "unknown command $command (see rig.sh with no arguments)" ;;
esac
