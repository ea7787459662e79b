#!/usr/bin/env bash
#
# hack/e2e.sh: nodegc's end-to-end suite on a real single-node cluster built from modules (etcd, kube-apiserver,
# kube-controller-manager without its garbage collector, kube-scheduler, containerd 2.x, kubelet; see
# internal/testbed/kubecluster and test/e2e).
#
#   1. hack/install-tools.sh: the test-bed binaries, kubelet and kube-scheduler included (cached in _output/tools);
#   2. make image: nodegc's image, _output/image/nodegc.tar;
#   3. go test -tags e2e ./internal/testbed/kubecluster/ ./test/e2e/: the cluster comes up, the image is pushed to
#      the node's registry, deploy/daemonset.yaml is rendered with hack/render-deploy.sh and applied, and the
#      owner, container and image GC cases run against the real kubelet and containerd. Everything is torn down
#      and checked for leftovers (processes, mounts, cgroups, kubelet files).
#
# Usage: hack/e2e.sh [-run REGEXP]
#   A smoke subset: -run 'TestE2E/^(OwnerGC|ImageGCThreshold)$' (the cluster comes up and nodegc is deployed and
#   checked before any case runs). Cases: DiskPressureKubelet (first, before nodegc is deployed: the kubelet's own
#   image GC and eviction, the baseline) OwnerGC ContainerGCRestarts ContainerGCDeletedPod ContainerGCBytes
#   ImageGCInUseTooBig ImageGCThreshold ScheduledImageKept Metrics Events (these two read what the others did)
#   RuntimeRestart (restarts containerd) DiskPressureNodegc (last: restarts the kubelet and nodegc with other
#   settings, and prints the side-by-side table with the baseline) HelmInstall (after all the others: the manifest
#   is removed and the chart deploy/helm/nodegc installed with helm, checked and uninstalled); -run
#   'TestE2E/DiskPressure' runs both sides.
# Env:   E2E_TEST_FLAGS  more `go test` flags (default: -v);  NODEGC_SKIP_APT=1 as for install-tools.sh.
#
# Needs root (containerd, a loop-mounted ext4, cgroups, the kubelet). One kubelet per machine: concurrent runs
# wait for each other (flock /tmp/nodegc-kubecluster.lock).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf '[e2e] %s\n' "$*"; }
elapsed() { local s=$(($(date +%s) - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

RUN=()
case "${1:-}" in
"") ;;
-run)
	[[ -n "${2:-}" ]] || { echo "usage: $0 [-run REGEXP]" >&2; exit 2; }
	RUN=(-run "$2")
	;;
-h | --help)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
*) echo "usage: $0 [-run REGEXP]" >&2; exit 2 ;;
esac
if ((EUID != 0)); then
	echo "[e2e] needs root: it runs containerd and a kubelet, loop-mounts a filesystem and creates cgroups" >&2
	exit 1
fi

# failure_summary LOG: for every failed test that has no failed subtest, its last lines from test code ("file.go:N: ...",
# where t.Fatal and most t.Error messages are), short enough to stay in view at the end of a CI log.
failure_summary() {
	awk -v keep=4 -v width=2000 '
	/^=== (RUN|NAME|CONT|PAUSE) / { cur = $3; next }
	/^ *--- FAIL: / { failed[++nf] = $3; next }
	/^ +[A-Za-z0-9_.-]+\.go:[0-9]+: / {
		sub(/^ +/, "")
		n[cur]++
		msg[cur, n[cur]] = substr($0, 1, width)
	}
	END {
		if (nf == 0) exit
		print "[e2e] failed tests, last lines of each:"
		for (i = 1; i <= nf; i++) {
			name = failed[i]; leaf = 1
			for (j = 1; j <= nf; j++) if (index(failed[j], name "/") == 1) leaf = 0
			if (!leaf) continue
			printf "[e2e]   %s\n", name
			for (k = (n[name] > keep ? n[name] - keep + 1 : 1); k <= n[name]; k++) printf "[e2e]     %s\n", msg[name, k]
		}
	}' "$1"
}

START=$(date +%s)
log "tools (kubelet, kube-scheduler, kube-apiserver, kube-controller-manager, etcd, containerd) ..."
hack/install-tools.sh
t=$(date +%s)
log "make image ..."
make image IMAGE=nodegc.e2e/nodegc:e2e
log "image built in $(elapsed "$t")"

t=$(date +%s)
# The logs of the last run (kubelet, kube-scheduler, containerd, every pod's containers including nodegc's agents),
# saved by the cluster's teardown.
ARTIFACTS="$ROOT/_output/e2e"
rm -rf "$ARTIFACTS"
mkdir -p "$ARTIFACTS"
# -p 1: each package brings up a kubelet, and one kubelet runs per machine at a time.
# shellcheck disable=SC2086 # E2E_TEST_FLAGS is a list of flags
# The test output, with the report (what each collector removed and kept, and why), is also kept in e2e.log.
if ! go test -race -tags e2e -count=1 -p 1 -timeout 20m -artifacts -outputdir "$ARTIFACTS" ${E2E_TEST_FLAGS:--v} "${RUN[@]}" \
	./internal/testbed/kubecluster/ ./test/e2e/ 2>&1 | tee "$ARTIFACTS/e2e.log"; then
	failure_summary "$ARTIFACTS/e2e.log"
	log "FAILED after $(elapsed "$t"); output in $ARTIFACTS/e2e.log, logs of the run under $ARTIFACTS/_artifacts"
	exit 1
fi
log "tests passed in $(elapsed "$t"); total $(elapsed "$START"); report in $ARTIFACTS/e2e.log, logs of the run under $ARTIFACTS/_artifacts"
