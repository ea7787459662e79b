#!/usr/bin/env bash
#
# hack/install-tools.sh: idempotent, cached installer of the test-bed binaries (containerd 1.6
# and runc from Debian, containerd 2.x, etcd, the Kubernetes binaries, helm and crictl built from the Go module proxy). Versions are pinned in hack/versions.sh. Layout under TOOLS = $NODEGC_TOOLS_DIR, default _output/tools
# (relied on by the Go test harnesses, which read NODEGC_TOOLS_DIR too: internal/testbed.ToolsDir):
#
#   TOOLS/bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl,helm,crictl}
#   TOOLS/containerd2/bin/{containerd,containerd-shim-runc-v2}   (own dir: the daemon finds its shim via PATH)
#   TOOLS/stamps/NAME                                             (version each binary was built at)
#   /usr/bin/containerd (Debian, 1.6.x), /usr/sbin/runc, /usr/lib/cni/*    (apt)
#
# A binary is rebuilt only if it is missing or its stamp does not hold the pinned version; the stamp is written
# only after a successful build and a smoke check of the binary's version output.
#
# When hack/versions.sh no longer matches a tools module (hack/tools/*/go.mod, go.sum), the installer regenerates it
# (commit the result); under CI=true it fails instead: CI never rewrites tracked files.
#
# Usage: hack/install-tools.sh [--print-env]
# Env:   NODEGC_TOOLS_DIR   where the tools go (an absolute path; default _output/tools in the repository): a cache
#                           outside the checkout, shared by worktrees or kept by CI; the tests read it too.
#        NODEGC_SKIP_APT=1  skip the apt step (e.g. not root on a dev box); GOCACHE/GOMODCACHE/GOPROXY are honoured.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOOLS_DIR="${NODEGC_TOOLS_DIR:-$ROOT/_output/tools}"
BIN_DIR="$TOOLS_DIR/bin"
CONTAINERD2_BIN_DIR="$TOOLS_DIR/containerd2/bin"
STAMP_DIR="$TOOLS_DIR/stamps"
APT_PACKAGES=(containerd runc e2fsprogs btrfs-progs containernetworking-plugins util-linux)

log() { printf '[tools] %s\n' "$*"; }
die() { printf '[tools] ERROR: %s\n' "$*" >&2; exit 1; }
elapsed() { local s=$(($(date +%s) - $1)); if ((s >= 60)); then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }

[[ "$TOOLS_DIR" == /* ]] || die "NODEGC_TOOLS_DIR=$TOOLS_DIR: want an absolute path (the tests read it from each package's directory)"

# shellcheck source=hack/versions.sh
source "$ROOT/hack/versions.sh"

case "${1:-}" in
"") ;;
--print-env)
	printf 'NODEGC_TOOLS_DIR=%q\n' "$TOOLS_DIR"
	printf 'NODEGC_TOOLS_BIN=%q\n' "$BIN_DIR"
	printf 'NODEGC_CONTAINERD2_BIN=%q\n' "$CONTAINERD2_BIN_DIR"
	printf 'KUBERNETES_VERSION=%q\nETCD_VERSION=%q\nHELM_VERSION=%q\nCRICTL_VERSION=%q\nCONTAINERD2_VERSION=%q\n' \
		"$KUBERNETES_VERSION" "$ETCD_VERSION" "$HELM_VERSION" "$CRICTL_VERSION" "$CONTAINERD2_VERSION"
	exit 0
	;;
-h | --help)
	sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
	exit 0
	;;
*) die "unknown argument: $1 (usage: $0 [--print-env])" ;;
esac

START=$(date +%s)
mkdir -p "$BIN_DIR" "$CONTAINERD2_BIN_DIR" "$STAMP_DIR" "$TOOLS_DIR/tmp"
# Keep everything under _output/ out of git without touching the repo's own files (when the tools go there).
if [[ "$TOOLS_DIR" == "$ROOT/_output/"* && ! -f "$ROOT/_output/.gitignore" ]]; then
	printf '*\n' >"$ROOT/_output/.gitignore"
fi

# One installer at a time (several `make test` may start together).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$TOOLS_DIR/.lock"
	if ! flock -n 9; then
		log "waiting for another install-tools.sh to finish (lock $TOOLS_DIR/.lock) ..."
		flock 9
	fi
	# Under the lock, leftovers of an installer that was killed are ours to remove.
	rm -rf "$TOOLS_DIR"/tmp/build.*
fi

# Scratch dir for builds: binaries are built here, smoke-checked, then renamed into place (atomic, and safe while
# an old binary is running).
WORK="$(mktemp -d "$TOOLS_DIR/tmp/build.XXXXXX")"
# Module-less commands (`go install pkg@v`, `go mod download mod@v`) run in a dir with no go.mod above it, so they
# can never touch the product module.
NOMOD="$(mktemp -d "${TMPDIR:-/tmp}/nodegc-tools.XXXXXX")"
trap 'rm -rf "$WORK" "$NOMOD"' EXIT

# Tool builds: static, no VCS stamping, never a go.work; GOCACHE/GOMODCACHE come from the environment.
export CGO_ENABLED=0 GOWORK=off
GO_BUILD_FLAGS=(-buildvcs=false)

# up_to_date NAME PATH VERSION: the binary exists and its stamp holds VERSION.
up_to_date() {
	[[ -x "$2" && -f "$STAMP_DIR/$1" && "$(<"$STAMP_DIR/$1")" == "$3" ]]
}

# smoke BIN WANT ARGS...: BIN ARGS... succeeds and its output contains WANT.
smoke() {
	local bin="$1" want="$2" out
	shift 2
	out="$("$bin" "$@" 2>&1)" || die "smoke check failed: $bin $* exited non-zero: $out"
	grep -qF -- "$want" <<<"$out" || die "smoke check failed: $bin $* does not report '$want': $out"
}

# syncing FILE WANT: FILE (a tools module under hack/tools/, tracked in git) no longer matches hack/versions.sh
# and is about to be regenerated to WANT. Under CI=true, fail instead: CI must not rewrite tracked files (the run
# would test a checkout that differs from the commit, and leave it dirty).
syncing() {
	if [[ "${CI:-}" == true ]]; then
		die "$1 does not match hack/versions.sh (want: $2); under CI=true it is not rewritten: run hack/install-tools.sh (make tools) without CI=true and commit the result"
	fi
	log "syncing $1 to $2 (commit the result) ..."
}

# place NAME BUILT DEST VERSION: move a built, smoke-checked binary into place, then write its stamp.
place() {
	chmod 0755 "$2"
	mv -f "$2" "$3"
	printf '%s\n' "$4" >"$STAMP_DIR/$1"
}

# --- 1. Debian packages ---------------------------------------------------------------------------------------
install_apt() {
	if [[ "${NODEGC_SKIP_APT:-}" == 1 ]]; then
		log "apt: skipped (NODEGC_SKIP_APT=1)"
		check_containerd16 warn
		return
	fi
	command -v dpkg >/dev/null 2>&1 || die "dpkg not found: install ${APT_PACKAGES[*]} by hand and set NODEGC_SKIP_APT=1"
	local p out missing=()
	for p in "${APT_PACKAGES[@]}"; do
		# Capture, do not pipe into `grep -q`: under pipefail, grep exiting early SIGPIPEs dpkg and the check fails.
		out="$(dpkg -s "$p" 2>/dev/null)" || out=""
		[[ "$out" == *$'\nStatus: install ok installed'* ]] || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		log "apt: ${APT_PACKAGES[*]}: installed"
		check_containerd16 die
		return
	fi
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 || die "apt packages missing (${missing[*]}) and not root"
		sudo=(sudo)
	fi
	local t0
	t0=$(date +%s)
	log "apt: installing ${missing[*]} (cold: ~15 s) ..."
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
	log "apt: installed ${missing[*]} in $(elapsed "$t0")"
	check_containerd16 die
}

# check_containerd16 die|warn: the tests call Debian's containerd "1.6" (internal/testbed.Containerd16) and run
# /usr/bin/containerd with /usr/bin/containerd-shim-runc-v2: check that it is a 1.6.x (Debian 12, bookworm, ships
# one; a newer release a newer containerd). Without one: die, or, with NODEGC_SKIP_APT=1, only warn (the tests
# check it too).
check_containerd16() {
	local bin=/usr/bin/containerd out v
	if [[ ! -x "$bin" ]]; then
		[[ "$1" == warn ]] && { log "WARNING: $bin not found: the containerd 1.6 tests will skip (fail under CI=true)"; return 0; }
		die "$bin not found after the apt step"
	fi
	# "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3": the third word.
	out="$("$bin" --version 2>&1)" || out=""
	read -r _ _ v _ <<<"$out"
	if [[ "$v" == 1.6.* || "$v" == v1.6.* ]]; then
		log "containerd 1.6: $bin is $v"
		return 0
	fi
	local msg="$bin is ${v:-of an unknown version ($out)}, not a 1.6.x: the tests need containerd 1.6 there (internal/testbed.Containerd16),"
	msg+=" with its shim as /usr/bin/containerd-shim-runc-v2. Debian 12 (bookworm) has it (apt-get install containerd=1.6.*);"
	msg+=" on another release, install a containerd 1.6.x release (containerd and containerd-shim-runc-v2) into /usr/bin by hand,"
	msg+=" keep apt from replacing it (apt-mark hold containerd, or remove the package), and rerun with NODEGC_SKIP_APT=1"
	[[ "$1" == warn ]] && { log "WARNING: $msg"; return 0; }
	die "$msg"
}

# --- 2. containerd 2.x + shim ----------------------------------------------------------------------------------
install_containerd2() {
	local v="$CONTAINERD2_VERSION" mod=github.com/containerd/containerd/v2
	if up_to_date containerd "$CONTAINERD2_BIN_DIR/containerd" "$v" &&
		up_to_date containerd-shim-runc-v2 "$CONTAINERD2_BIN_DIR/containerd-shim-runc-v2" "$v"; then
		log "containerd $v + containerd-shim-runc-v2: cached"
		return
	fi
	local t0
	t0=$(date +%s)
	log "building containerd $v + containerd-shim-runc-v2 (cold: ~2.5 min) ..."
	mkdir -p "$WORK/containerd2"
	(cd "$NOMOD" && GOBIN="$WORK/containerd2" go install "${GO_BUILD_FLAGS[@]}" \
		-ldflags "-X $mod/version.Version=$v" \
		"$mod/cmd/containerd@$v" "$mod/cmd/containerd-shim-runc-v2@$v")
	smoke "$WORK/containerd2/containerd" "$v" --version
	smoke "$WORK/containerd2/containerd-shim-runc-v2" "$v" -v
	place containerd "$WORK/containerd2/containerd" "$CONTAINERD2_BIN_DIR/containerd" "$v"
	place containerd-shim-runc-v2 "$WORK/containerd2/containerd-shim-runc-v2" "$CONTAINERD2_BIN_DIR/containerd-shim-runc-v2" "$v"
	log "built containerd $v + containerd-shim-runc-v2 in $(elapsed "$t0")"
}

# --- 3a. etcd -------------------------------------------------------------------------------------------------
install_etcd() {
	local v="$ETCD_VERSION" dir="$ROOT/hack/tools/etcd" mod=go.etcd.io/etcd/server/v3
	if up_to_date etcd "$BIN_DIR/etcd" "$v"; then
		log "etcd $v: cached"
		return
	fi
	local t0
	t0=$(date +%s)
	# In sync when the server and go.etcd.io/etcd/api/v3 (which holds the version string) are both at $v.
	local m ok=1
	for m in "$mod" go.etcd.io/etcd/api/v3; do
		grep -qE "^[[:space:]]*(require[[:space:]]+)?${m//./\\.}[[:space:]]+${v//./\\.}([[:space:]]|$)" "$dir/go.mod" 2>/dev/null || ok=0
	done
	if ((!ok)); then
		# Regenerate from scratch: `go mod edit -require` alone would keep the other etcd modules (api/v3, which
		# holds the version string, client/v3, ...) at their old versions on a downgrade.
		syncing hack/tools/etcd/go.mod "$mod $v"
		{
			echo '// Tools module: etcd for the test bed. Not part of the product module.'
			echo '// Generated by hack/install-tools.sh from hack/versions.sh (ETCD_VERSION); edit that, not this file.'
			echo 'module github.com/nodegc/nodegc/hack/tools/etcd'
			echo
			echo 'go 1.24.0'
			echo
			echo "require $mod $v"
		} >"$dir/go.mod"
		rm -f "$dir/go.sum"
		(cd "$dir" && go mod tidy)
	fi
	log "building etcd $v (cold: ~20 s) ..."
	(cd "$dir" && go build "${GO_BUILD_FLAGS[@]}" -o "$WORK/etcd" .)
	smoke "$WORK/etcd" "etcd Version: ${v#v}" --version
	place etcd "$WORK/etcd" "$BIN_DIR/etcd" "$v"
	log "built etcd $v in $(elapsed "$t0")"
}

# --- 3b. kube-apiserver, kube-controller-manager, ... ------------------------------------------------------------
# hack/tools/kube/go.mod requires k8s.io/kubernetes at KUBERNETES_VERSION, replaces every k8s.io/* staging module
# (`k8s.io/xxx => ./staging/src/k8s.io/xxx` upstream) with v0.Y.Z, and lists the binaries as `tool`s so that
# `go mod tidy` keeps go.sum complete for them. Regenerated here when versions.sh no longer matches it.
sync_kube_module() {
	local v="$KUBERNETES_VERSION" dir="$ROOT/hack/tools/kube" b ok=1
	grep -qE "^[[:space:]]*(require[[:space:]]+)?k8s\.io/kubernetes[[:space:]]+${v//./\\.}([[:space:]]|$)" "$dir/go.mod" 2>/dev/null || ok=0
	for b in $KUBE_BINARIES; do
		grep -qE "(^|[[:space:]])k8s\.io/kubernetes/cmd/${b}[[:space:]]*$" "$dir/go.mod" 2>/dev/null || ok=0
	done
	((ok)) && return 0

	syncing hack/tools/kube/go.mod "k8s.io/kubernetes $v, tools: $KUBE_BINARIES"
	local json upstream staging m
	json="$(cd "$NOMOD" && go mod download -json "k8s.io/kubernetes@$v" 2>&1)" || die "cannot download k8s.io/kubernetes@$v: $json"
	upstream="$(sed -nE 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p' <<<"$json")"
	[[ -f "$upstream" ]] || die "cannot download k8s.io/kubernetes@$v: $json"
	staging="$(sed -nE 's#^[[:space:]]*(k8s\.io/[^[:space:]]+)[[:space:]]+=>[[:space:]]+\./staging/src/k8s\.io/.*#\1#p' "$upstream")"
	[[ -n "$staging" ]] || die "no staging replace directives found in $upstream"
	{
		echo '// Tools module: Kubernetes binaries for the test bed. Not part of the product module.'
		echo '// Generated by hack/install-tools.sh from hack/versions.sh (KUBERNETES_VERSION, KUBE_BINARIES);'
		echo '// edit those, not this file.'
		echo 'module github.com/nodegc/nodegc/hack/tools/kube'
		echo
		sed -nE '/^go[[:space:]]+([0-9.]+).*/{s//go \1/p;q}' "$upstream"
		echo
		# Same GODEBUG defaults as the upstream build (they follow the main module's go.mod).
		grep -E '^godebug[[:space:]]' "$upstream" || true
		echo
		echo "require k8s.io/kubernetes $v"
		echo
		echo 'tool ('
		for b in $KUBE_BINARIES; do printf '\tk8s.io/kubernetes/cmd/%s\n' "$b"; done
		echo ')'
		echo
		echo '// Every k8s.io/* staging module of k8s.io/kubernetes, at the matching v0.Y.Z.'
		echo 'replace ('
		for m in $staging; do printf '\t%s => %s v0.%s\n' "$m" "$m" "${v#v1.}"; done
		echo ')'
	} >"$WORK/kube.go.mod"
	cp "$WORK/kube.go.mod" "$dir/go.mod"
	rm -f "$dir/go.sum"
	(cd "$dir" && go mod tidy)
}

install_kube() {
	local v="$KUBERNETES_VERSION" b need=() pkgs=()
	for b in $KUBE_BINARIES; do
		if up_to_date "$b" "$BIN_DIR/$b" "$v"; then
			log "$b $v: cached"
		else
			need+=("$b")
			pkgs+=("k8s.io/kubernetes/cmd/$b")
		fi
	done
	((${#need[@]})) || return 0
	local t0
	t0=$(date +%s)
	sync_kube_module
	local major minor
	IFS=. read -r major minor _ <<<"${v#v}"
	local ldflags="-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=$major"
	ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$v"
	log "building ${need[*]} $v in one go build (cold: ~5 min for kube-apiserver + kube-controller-manager, ~3 min more for kubelet, kube-scheduler and kubectl) ..."
	mkdir -p "$WORK/kube"
	(cd "$ROOT/hack/tools/kube" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" -o "$WORK/kube/" "${pkgs[@]}")
	for b in "${need[@]}"; do
		case "$b" in
		kubectl) smoke "$WORK/kube/$b" "Client Version: $v" version --client ;;
		*) smoke "$WORK/kube/$b" "Kubernetes $v" --version ;;
		esac
	done
	for b in "${need[@]}"; do place "$b" "$WORK/kube/$b" "$BIN_DIR/$b" "$v"; done
	log "built ${need[*]} $v in $(elapsed "$t0")"
}

# --- 3c. helm -------------------------------------------------------------------------------------------------
# hack/tools/helm/go.mod requires helm.sh/helm/v3 at HELM_VERSION (cmd/helm as a tool) and pins every module helm
# shares with hack/tools/kube (k8s.io/*, but also golang.org/x/*, spf13/pflag, ...: a package is compiled anew when
# any of its dependencies differs), with replace, to the version hack/tools/kube/go.mod resolves it to. Built with
# the kube build's flags, helm then links the very packages the kube build left in the Go build cache: only helm's
# own code and its other dependencies are compiled anew. Regenerated when versions.sh or hack/tools/kube/go.mod
# no longer matches it.
# Modules helm needs at its own, newer version: pflag (FlagSet.ParseErrorsAllowlist, pflag v1.0.7).
HELM_OWN_MODULES=(github.com/spf13/pflag)
sync_helm_module() {
	local v="$HELM_VERSION" dir="$ROOT/hack/tools/helm" kube="$ROOT/hack/tools/kube/go.mod"
	local json upstream m ver want
	json="$(cd "$NOMOD" && go mod download -json "helm.sh/helm/v3@$v" 2>&1)" || die "cannot download helm.sh/helm/v3@$v: $json"
	upstream="$(sed -nE 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p' <<<"$json")"
	[[ -f "$upstream" ]] || die "cannot download helm.sh/helm/v3@$v: $json"
	# kube's resolved versions: "module version", its replace target winning over its requirement.
	local -A kv=()
	while read -r m ver; do kv[$m]="$ver"; done < <(
		sed -nE 's#^[[:space:]]*(require[[:space:]]+)?([a-zA-Z0-9./_~-]+)[[:space:]]+(v[^[:space:]]+)([[:space:]]*//.*)?$#\2 \3#p' "$kube"
		sed -nE 's#^[[:space:]]*([a-zA-Z0-9./_~-]+)[[:space:]]+=>[[:space:]]+[a-zA-Z0-9./_~-]+[[:space:]]+(v[^[:space:]]+)[[:space:]]*$#\1 \2#p' "$kube"
	)
	((${#kv[@]})) || die "no requirements found in $kube"
	want="$(
		echo '// Tools module: helm for the chart tests, make manifests and the e2e suite. Not part of the product module.'
		echo '// Generated by hack/install-tools.sh from hack/versions.sh (HELM_VERSION) and hack/tools/kube/go.mod;'
		echo '// edit those, not this file.'
		echo 'module github.com/nodegc/nodegc/hack/tools/helm'
		echo
		sed -nE '/^go[[:space:]]+([0-9.]+).*/{s//go \1/p;q}' "$upstream"
		echo
		echo "require helm.sh/helm/v3 $v"
		echo
		echo 'tool helm.sh/helm/v3/cmd/helm'
		echo
		echo '// Every module helm shares with hack/tools/kube, at exactly the version hack/tools/kube uses,'
		echo "// except those helm needs newer: ${HELM_OWN_MODULES[*]}."
		echo 'replace ('
		while read -r m; do
			[[ -n "${kv[$m]:-}" && " ${HELM_OWN_MODULES[*]} " != *" $m "* ]] && printf '\t%s => %s %s\n' "$m" "$m" "${kv[$m]}"
		done < <(sed -nE 's#^[[:space:]]*(require[[:space:]]+)?([a-zA-Z0-9./_~-]+)[[:space:]]+v[^[:space:]]+([[:space:]]*//.*)?$#\2#p' "$upstream" | sort -u)
		echo ')'
	)"
	# The generated head is kept as the first lines of go.mod; go mod tidy appends below it.
	if [[ -f "$dir/go.mod.in" && "$(<"$dir/go.mod.in")" == "$want" && -f "$dir/go.sum" ]]; then
		return 0
	fi
	syncing hack/tools/helm/go.mod.in "helm.sh/helm/v3 $v and hack/tools/kube's module versions"
	mkdir -p "$dir"
	printf '%s\n' "$want" >"$dir/go.mod.in"
	cp "$dir/go.mod.in" "$dir/go.mod"
	rm -f "$dir/go.sum"
	(cd "$dir" && go mod tidy)
}

install_helm() {
	# The stamp holds kube's version too: hack/tools/helm follows hack/tools/kube's module versions.
	local v="$HELM_VERSION" stamp="$HELM_VERSION kube $KUBERNETES_VERSION"
	if up_to_date helm "$BIN_DIR/helm" "$stamp"; then
		log "helm $v: cached"
		return
	fi
	local t0
	t0=$(date +%s)
	sync_helm_module
	log "building helm $v (cold: ~35 s once the kube binaries are built, ~4 min without) ..."
	# -X of helm's version only: link-time, so the compiled packages stay those of the kube build.
	(cd "$ROOT/hack/tools/helm" && go build "${GO_BUILD_FLAGS[@]}" \
		-ldflags "-X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
		-o "$WORK/helm" helm.sh/helm/v3/cmd/helm)
	smoke "$WORK/helm" "Version:\"$v\"" version
	place helm "$WORK/helm" "$BIN_DIR/helm" "$stamp"
	log "built helm $v in $(elapsed "$t0")"
}

# --- 3d. crictl -----------------------------------------------------------------------------------------------
# `go install sigs.k8s.io/cri-tools/cmd/crictl@v` is refused (the proxy will not list cri-tools' versions):
# download the module and build inside a writable copy of it.
install_crictl() {
	local v="$CRICTL_VERSION" mod=sigs.k8s.io/cri-tools json src
	if up_to_date crictl "$BIN_DIR/crictl" "$v"; then
		log "crictl $v: cached"
		return
	fi
	local t0
	t0=$(date +%s)
	log "building crictl $v (cold: ~1 min) ..."
	json="$(cd "$NOMOD" && go mod download -json "$mod@$v" 2>&1)" || die "cannot download $mod@$v: $json"
	src="$(sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p' <<<"$json")"
	[[ -d "$src" ]] || die "cannot download $mod@$v: $json"
	cp -R "$src" "$WORK/cri-tools"
	chmod -R u+w "$WORK/cri-tools"
	(cd "$WORK/cri-tools" && go build "${GO_BUILD_FLAGS[@]}" -ldflags "-X $mod/pkg/version.Version=$v" \
		-o "$WORK/crictl" ./cmd/crictl)
	smoke "$WORK/crictl" "$v" --version
	place crictl "$WORK/crictl" "$BIN_DIR/crictl" "$v"
	log "built crictl $v in $(elapsed "$t0")"
}

install_apt
install_containerd2
install_etcd
install_kube
install_helm
install_crictl

summary="containerd $CONTAINERD2_VERSION, containerd-shim-runc-v2 $CONTAINERD2_VERSION, etcd $ETCD_VERSION"
for b in $KUBE_BINARIES; do summary+=", $b $KUBERNETES_VERSION"; done
summary+=", helm $HELM_VERSION, crictl $CRICTL_VERSION"
if command -v dpkg-query >/dev/null 2>&1; then
	for p in containerd runc; do
		summary+=", $p $(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?') (debian)"
	done
fi
log "done in $(elapsed "$START"): $summary"
