#!/usr/bin/env bash
#
# hack/gen-deploy.sh: generate deploy/daemonset.yaml from the Helm chart deploy/helm/nodegc (make manifests).
# The chart is the one source of the manifests; deploy/daemonset.yaml is the chart rendered with
#
#   helm template nodegc deploy/helm/nodegc --namespace nodegc --set namespace.create=true --set helmLabels=false
#
# (a plain manifest creates its namespace, and carries no release-specific labels), without Helm's "# Source:"
# lines, under the header comment below. deploy's tests fail when the file drifts from the chart.
#
# Usage: hack/gen-deploy.sh [OUT]   OUT defaults to deploy/daemonset.yaml; - prints to stdout
# Env:   HELM  the helm binary (default $NODEGC_TOOLS_DIR/bin/helm, NODEGC_TOOLS_DIR defaulting to _output/tools:
#              built by make tools)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
-h | --help)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
esac
OUT="${1:-$ROOT/deploy/daemonset.yaml}"
HELM="${HELM:-${NODEGC_TOOLS_DIR:-$ROOT/_output/tools}/bin/helm}"
[[ -x "$HELM" ]] || { echo "gen-deploy: $HELM not found; run make tools (or set HELM)" >&2; exit 1; }

header() {
	cat <<'HEADER'
# nodegc: node-level garbage collection for Kubernetes.
#
#   kubectl apply -f deploy/daemonset.yaml
#
# Generated from the Helm chart deploy/helm/nodegc by hack/gen-deploy.sh (make manifests): edit the chart,
# not this file. `helm install nodegc deploy/helm/nodegc -n nodegc`, into a namespace made and labelled as this
# file's Namespace is (README, Install with Helm), installs the same objects (plus Helm's labels, without the
# Namespace); the chart's values.yaml and presets/ (k3s, RKE2, CRI-O, kind, ...) adapt them.
#
# The owner collector needs kube-controller-manager's garbage collector off (--controllers=*,-garbagecollector):
# with both on, both collect and nodegc's holds of orphan and foregroundDeletion finalizers do not apply. Where
# it cannot be turned off (managed control planes), leave the Deployment nodegc-owner and the nodegc-owner RBAC
# out, or use the chart's ownerGC.mode=off (README, Deploy). The owner collector then collects nodegc's own pods
# too: uninstall with `kubectl delete -f deploy/daemonset.yaml`, which deletes the Namespace (the namespace
# controller deletes the pods, ReplicaSets and ControllerRevisions left in it), or turn kube-controller-manager's
# garbage collector back on first; never with --cascade=foreground (README, Uninstalling).
#
# Two workloads share one image and one ConfigMap:
#   - DaemonSet nodegc-node (--owner-gc=off): image and dead-container GC on every node, through the
#     node's CRI socket. Its ServiceAccount lists and watches pods and nodes, gets node leases (in
#     kube-node-lease) and writes events; it can delete nothing in the API, so a compromised node holds no cluster-wide delete rights. Its reads are
#     cluster-wide, though: RBAC cannot narrow a list or watch to one node's pods, so the token on every
#     node can list and watch every Pod (whole specs, literal env values included) and every Node of the
#     cluster (README, Deploy).
#   - Deployment nodegc-owner (--owner-gc=only, 2 replicas, leader-elected through a Lease): the
#     cluster's ownerReference garbage collector. Its ServiceAccount gets, lists, watches, patches and
#     deletes every resource, as kube-controller-manager's collector does; that get includes pods/exec,
#     pods/attach, pods/portforward and nodes/proxy, so it prefers control-plane nodes (README, Deploy).
#   - FlowSchema nodegc-owner-gc: API Priority and Fairness puts the owner collector's requests in the
#     priority level workload-high, as kube-controller-manager's collector's, not workload-low with every
#     other ServiceAccount's.
#
# Single-workload alternative for small clusters (the chart's ownerGC.mode=auto): drop the Deployment, run
# the DaemonSet with --owner-gc=auto and bind the nodegc-owner ClusterRole and Role to the nodegc-node
# ServiceAccount, and drop the FlowSchema (its subject would be every node's agent). Every node then joins the election and the elected one runs the owner GC. The trade-off:
# every node's agent can get, list and watch every object of every resource (every Secret included, and
# pods/exec and nodes/proxy) and patch and delete any, so taking over any one node (the agent reaches the
# runtime socket) gives all of that;
# and the elected agent runs the owner GC within the node agent's memory limit (README, Deploy).
#
# Configuration: the ConfigMap nodegc-config below. The agents read it only at start, and the pods'
# checksum/config annotation changes only when this file is rendered again from the chart: after editing the
# ConfigMap (kubectl edit, or an edit of this file and kubectl apply), restart both workloads, or nodes run the
# old configuration until each pod happens to restart:
#
#   kubectl -n nodegc rollout restart daemonset/nodegc-node deployment/nodegc-owner
#
# Image: ghcr.io/nodegc/nodegc:latest below is the default; `make image` builds it without Docker and
# hack/render-deploy.sh IMAGE renders this file with another image (tested by the e2e suite).
#
# Running beside kubelet: set kubelet's imageGCHighThresholdPercent: 100 and imageMaximumGCAge: 0 so
# its periodic image GC does not race nodegc's, and keep nodegc's thresholds below the kubelet's eviction
# thresholds. Under disk pressure the kubelet's eviction still removes every unused image the runtime does
# not pin, nodegc's exclusions too: pin the images that must stay.
#
# imageGC.containerEvents stays false: set true, the agent subscribes to containerd 2.x's container event
# stream, and containerd then blocks every container create, start, stop and removal on the node while the
# agent does not read (a stopped or frozen pod, a checkpoint, CPU starvation): README, Safety rule 6.
HEADER
}

rendered="$("$HELM" template nodegc "$ROOT/deploy/helm/nodegc" --namespace nodegc \
	--set namespace.create=true --set helmLabels=false)"
# Drop Helm's "# Source: nodegc/templates/..." lines and the "---" before the first object.
body="$(sed -e '/^# Source: /d' <<<"$rendered" | sed -e '1{/^---$/d}')"
manifest() {
	header
	printf '%s\n' "$body"
}
if [[ "$OUT" == - ]]; then
	manifest
else
	manifest >"$OUT.tmp"
	mv -f "$OUT.tmp" "$OUT"
fi
