// Package testbed locates the real components nodegc is tested against
// (containerd, runc, etcd, kube-apiserver, ...) and decides what a test does
// when one is missing: under CI=true it fails loudly, otherwise it skips
// with a message saying how to get it (`make tools`).
//
// The binaries are built or installed by hack/install-tools.sh into
// _output/tools (override with NODEGC_TOOLS_DIR, an absolute path, which
// the installer honours too). The packages below this
// one start and tear down throw-away instances of them.
//
// It also holds, once, the support every test, harness and the demo
// (hack/demo) share:
//
//   - waiting: Poll, the one polling loop (the deadline is on its context;
//     for code that is not a test), and WaitFor, Poll for a test (fails it
//     after a timeout);
//   - ports: FreePorts, distinct free TCP ports for the servers a test
//     starts;
//   - metrics: ParseMetrics and ScrapeMetrics read the Prometheus text
//     format with expfmt into the families a registry's Gather returns;
//     MetricSum sums the samples of one name and labels, and Samples lists
//     them as the format exposes them.
package testbed
