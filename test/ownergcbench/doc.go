// Package ownergcbench measures nodegc's owner GC against
// kube-controller-manager's garbage collector and against the API server's
// own delete rate, side by side on one real kube-apiserver + etcd:
// BenchmarkOwnerGC, run by `make bench` and `make bench-ownergc`. It holds
// no code outside its tests.
//
// It runs nodegc as its users do, the `nodegc run --owner-gc=only` process
// built from this tree (internal/testbed/nodegcproc), and
// kube-controller-manager with only its garbagecollector controller
// (internal/testbed/cluster), so that memory and start-up are those of the
// real binaries. It is a package of its own, not a test of pkg/ownergc,
// because it needs none of that package's internals: it reads what an
// operator can read (the processes' /proc entries, logs and /metrics, and
// kube-apiserver's apiserver_request_total), and it keeps measuring the same
// way whatever the collector's internals become.
package ownergcbench
