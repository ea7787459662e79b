#!/usr/bin/env bash
#
# hack/render-deploy.sh: print deploy/daemonset.yaml with another image and, optionally, the node's own paths
# and ports. No kustomize: every change is the literal replacement of one default value by another, everywhere
# it appears in the file, so the rendered manifest stays the file users apply, value for value.
#
# Usage: hack/render-deploy.sh IMAGE [MANIFEST] > rendered.yaml
#
#   IMAGE     replaces ghcr.io/nodegc/nodegc:latest as the image of the DaemonSet and of the owner collector
#             Deployment
#   MANIFEST  defaults to deploy/daemonset.yaml
#
# Node overrides, each optional (environment variables; the default is the value in the manifest):
#
#   NODEGC_RUNTIME_SOCKET      /run/containerd/containerd.sock  the CRI socket; the agent mounts its directory
#                                                               (/run/containerd by default), which follows it
#   NODEGC_CONTAINERD_ROOT     /var/lib/containerd              the runtime's root (holds the image filesystem):
#                                                               containerd's, or CRI-O's /var/lib/containers/storage
#   NODEGC_POD_LOGS_DIR        /var/log/pods                    the kubelet's podLogsDir
#   NODEGC_CONTAINER_LOGS_DIR  /var/log/containers              the kubelet's container log links
#   NODEGC_STATE_DIR           /var/lib/nodegc                  nodegc's state directory
#   NODEGC_HEALTHZ_PORT        10280                            /healthz and /readyz (host network)
#   NODEGC_METRICS_PORT        10281                            /metrics (host network)
#
# A path override replaces the host path, the path the agent's container mounts it at and the path in the
# ConfigMap's configuration alike: nodegc then sees every path where the node has it. That matters: CRI reports
# host paths (the image filesystem's mountpoint, container log paths) and the kubelet's /var/log/containers
# links point at host paths, so a path mounted elsewhere in the container would not match what the runtime says.
# A port override replaces the container port and the bind address of the configuration. The socket's
# directory is mounted rather than the socket file (a restarted runtime makes a new socket file, which only a
# directory mount shows), so NODEGC_RUNTIME_SOCKET also replaces the default socket directory by its own.
#
# Values that coincide (two node paths, or a node path and the configuration's /etc/nodegc; two equal ports) are
# refused, naming both; so are a state directory and log directories lying in one another (NODEGC_STATE_DIR,
# NODEGC_POD_LOGS_DIR, NODEGC_CONTAINER_LOGS_DIR), which the agent refuses.
#
# Each default must occur in the manifest (else the script fails: it is out of date with the file). Every
# default is first replaced by a placeholder, longest default first, and only then the placeholders by the
# values: so a value is never matched again by another default (/var/run/containerd/containerd.sock holds
# /run/containerd). The e2e suite (test/e2e) applies the output of this script to a real single-node cluster.
set -euo pipefail

die() { printf 'render-deploy: %s\n' "$*" >&2; exit 1; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
-h | --help)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
"") die "usage: $0 IMAGE [MANIFEST] (see --help)" ;;
esac
IMAGE="$1"
MANIFEST="${2:-$ROOT/deploy/daemonset.yaml}"
(($# <= 2)) || die "usage: $0 IMAGE [MANIFEST] (see --help)"
[[ -f "$MANIFEST" ]] || die "$MANIFEST: no such file"
[[ "$IMAGE" =~ ^[a-z0-9][a-zA-Z0-9._/:@-]*$ ]] || die "IMAGE '$IMAGE' is not an image reference"

DEFAULT_IMAGE="ghcr.io/nodegc/nodegc:latest"
# Literal replacements "from|to|what". Ports go first and in their context (the configuration's
# ":PORT" bind address and the containerPort), so that no port number inside a path is touched and no
# replaced path can make a later match.
subs=("image: $DEFAULT_IMAGE|image: $IMAGE|IMAGE")
port() { # port DEFAULT VAR
	local def="$1" var="$2" val="${!2:-}"
	[[ -n "$val" && "$val" != "$def" ]] || return 0
	if ! [[ "$val" =~ ^[1-9][0-9]{0,4}$ ]] || ((val > 65535)); then
		die "$var='$val': want a port number"
	fi
	subs+=(":$def\"|:$val\"|$var" "containerPort: $def|containerPort: $val|$var")
}
path() { # path DEFAULT VAR
	local def="$1" var="$2" val="${!2:-}"
	[[ -n "$val" && "$val" != "$def" ]] || return 0
	[[ "$val" =~ ^/[a-zA-Z0-9._/-]*[a-zA-Z0-9._-]$ && "$val" != *//* ]] ||
		die "$var='$val': want an absolute path without spaces, '//' or a trailing '/'"
	subs+=("$def|$val|$var")
}
port 10280 NODEGC_HEALTHZ_PORT
port 10281 NODEGC_METRICS_PORT
path /run/containerd/containerd.sock NODEGC_RUNTIME_SOCKET
if [[ -n "${NODEGC_RUNTIME_SOCKET:-}" ]]; then
	socket_dir="${NODEGC_RUNTIME_SOCKET%/*}"
	[[ -n "$socket_dir" ]] || die "NODEGC_RUNTIME_SOCKET='$NODEGC_RUNTIME_SOCKET': the socket's directory is mounted; a socket in / would mount the whole host"
	NODEGC_RUNTIME_SOCKET_DIR="$socket_dir"
	path /run/containerd NODEGC_RUNTIME_SOCKET_DIR
fi
path /var/lib/containerd NODEGC_CONTAINERD_ROOT
path /var/log/pods NODEGC_POD_LOGS_DIR
path /var/log/containers NODEGC_CONTAINER_LOGS_DIR
path /var/lib/nodegc NODEGC_STATE_DIR

# Each node path is a volume mounted at its own path, beside the configuration's /etc/nodegc, and each port is
# a port of its own: two at one place would be two volumes at one mountPath, or one container port twice (the
# API server refuses the DaemonSet either way, naming the object, not the variable).
name() { # name VAR: how the user set it
	case "$1" in
	NODEGC_RUNTIME_SOCKET_DIR) printf "the directory of NODEGC_RUNTIME_SOCKET" ;;
	NODEGC_CONFIG_MOUNT) printf "the configuration's mount" ;;
	*) printf '%s' "$1" ;;
	esac
}
distinct() { # distinct KIND VAR=DEFAULT...
	local kind="$1" seen=() spec var val other
	shift
	for spec in "$@"; do
		var="${spec%%=*}" val="${!var:-${spec#*=}}"
		for other in "${seen[@]}"; do
			[[ "${other#*=}" != "$val" ]] ||
				die "$(name "$var") and $(name "${other%%=*}") are both $kind $val (a default unless set): give each its own"
		done
		seen+=("$var=$val")
	done
}
NODEGC_CONFIG_MOUNT=/etc/nodegc # not an override: where the ConfigMap is mounted
distinct path NODEGC_CONFIG_MOUNT=/etc/nodegc NODEGC_RUNTIME_SOCKET_DIR=/run/containerd NODEGC_CONTAINERD_ROOT=/var/lib/containerd \
	NODEGC_POD_LOGS_DIR=/var/log/pods NODEGC_CONTAINER_LOGS_DIR=/var/log/containers NODEGC_STATE_DIR=/var/lib/nodegc
distinct port NODEGC_HEALTHZ_PORT=10280 NODEGC_METRICS_PORT=10281
# Of the state directory and the two log directories none may lie in another: the agent refuses that at start
# (its state would go with what the container GC removes in a log directory), as the chart does at render
# (nodegc.checkMountPaths), so the DaemonSet would crash-loop on every node.
apart() { # apart VAR=DEFAULT...
	local a b va vb
	for a in "$@"; do
		va="${a%%=*}"
		va="${!va:-${a#*=}}"
		for b in "$@"; do
			vb="${b%%=*}"
			vb="${!vb:-${b#*=}}"
			[[ "$va" != "$vb"/* ]] ||
				die "$(name "${a%%=*}") $va lies in $(name "${b%%=*}") $vb (a default unless set): the agent refuses it (its state would go with what the container GC removes in a log directory); give each its own directory, apart"
		done
	done
}
apart NODEGC_STATE_DIR=/var/lib/nodegc NODEGC_POD_LOGS_DIR=/var/log/pods NODEGC_CONTAINER_LOGS_DIR=/var/log/containers

out="$(<"$MANIFEST")"
# Placeholders: \x01 does not occur in a manifest. Longest default first, so that a default holding
# another (the socket holds its directory) is taken whole.
mapfile -t order < <(for i in "${!subs[@]}"; do
	IFS='|' read -r from _ <<<"${subs[$i]}"
	printf '%d %d\n' "${#from}" "$i"
done | sort -k1,1nr -k2,2n | cut -d' ' -f2)
for i in "${order[@]}"; do
	IFS='|' read -r from to what <<<"${subs[$i]}"
	[[ "$out" == *"$from"* ]] || die "$what: '$from' does not occur in $MANIFEST (is this script out of date?)"
	# Quoted: a literal replacement, no pattern characters.
	out="${out//"$from"/$'\x01'"$i"$'\x01'}"
done
for i in "${order[@]}"; do
	IFS='|' read -r from to what <<<"${subs[$i]}"
	[[ "$out" != *"$from"* ]] || die "$what: '$from' still occurs after rendering"
done
for i in "${order[@]}"; do
	IFS='|' read -r from to what <<<"${subs[$i]}"
	out="${out//$'\x01'"$i"$'\x01'/"$to"}"
done
printf '%s\n' "$out"
