# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are used by the scripts that source this file
#
# hack/versions.sh: the ONE place where the versions of the test-bed tools are pinned.
# Sourced by hack/install-tools.sh (which builds them into $NODEGC_TOOLS_DIR, default _output/tools/); keep it side-effect free
# apart from setting the variables below.
#
# Changing a version here is all it takes: the installer rebuilds what changed (it compares against
# its stamps/NAME) and re-syncs the tools modules under hack/tools/ (commit their go.mod/go.sum
# afterwards; under CI=true it fails instead of rewriting them).

# kube-apiserver, kube-controller-manager, ... built from k8s.io/kubernetes (hack/tools/kube).
KUBERNETES_VERSION=v1.34.4
# Binaries built from k8s.io/kubernetes/cmd/<name> at KUBERNETES_VERSION, in one `go build`.
# Adding one is a change to this line only. kube-scheduler, kubelet and kubectl are for the e2e suite (make e2e).
KUBE_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"

# etcd server (hack/tools/etcd): the newest v3.5.x the module proxy serves
# (`go list -m -versions go.etcd.io/etcd/server/v3`).
ETCD_VERSION=v3.5.35

# helm v3 (hack/tools/helm), for the chart deploy/helm/nodegc: its tests (helm lint/template), make manifests
# (deploy/daemonset.yaml is rendered from the chart) and the e2e suite's helm install. A v3.19.x: it is built
# against Kubernetes 1.34 libraries, which hack/tools/helm pins to KUBERNETES_VERSION's so that the Go build
# cache shares them with the kube build.
HELM_VERSION=v3.19.5

# crictl, built from sigs.k8s.io/cri-tools (debugging aid).
CRICTL_VERSION=v1.36.0

# containerd 2.x (+ containerd-shim-runc-v2): NOT pinned here but taken from the product's go.mod, so the
# daemon under test is the one whose CRI API the product is compiled against.
_nodegc_containerd2_version() {
	local root mod=github.com/containerd/containerd/v2 v i
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)" || return 1
	# go.mod may still be being written (e.g. right after a checkout or during `go get`): retry for ~5 min.
	for ((i = 0; i < 60; i++)); do
		v="$(cd "$root" && GOWORK=off GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' "$mod" 2>/dev/null)" || v=""
		if [[ "$v" != v2.* ]]; then
			# go list needs a consistent go.mod/go.sum; a plain read of go.mod does not.
			v="$(sed -nE '/^[[:space:]]*(require[[:space:]]+)?github\.com\/containerd\/containerd\/v2[[:space:]]+(v2\.[^[:space:]]+).*/{s//\2/p;q}' \
				"$root/go.mod" 2>/dev/null)" || v=""
		fi
		if [[ "$v" == v2.* ]]; then
			printf '%s\n' "$v"
			return 0
		fi
		((i == 0)) && printf '[tools] waiting for %s in %s/go.mod ...\n' "$mod" "$root" >&2
		sleep 5
	done
	printf '[tools] ERROR: %s is not required by %s/go.mod\n' "$mod" "$root" >&2
	return 1
}
CONTAINERD2_VERSION="$(_nodegc_containerd2_version)" || return 1
