// Package testbed locates the real components nodegc is tested against
// (containerd, runc, etcd, kube-apiserver, ...) and decides what a test does
// when one is missing: under CI=true it fails loudly, otherwise it skips
// with a message saying how to get it (`make tools`).
//
// The binaries are built or installed by hack/install-tools.sh into
// _output/tools (override with NODEGC_TOOLS_DIR). The packages below this
// one start and tear down throw-away instances of them.
package testbed
