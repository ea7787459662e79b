// Package cluster runs a throw-away Kubernetes control plane for tests: a
// real etcd and a real kube-apiserver (and, on request, a real
// kube-controller-manager), started from the binaries that testbed.Binary
// locates and torn down when the test ends. There are no fake API servers
// here: tests of the pod informer, the ownerReference garbage collector,
// the RBAC of deploy/ and the benchmarks against the upstream collector all
// run against the API server's own semantics (finalizers, RBAC,
// impersonation, admission).
//
// Responsibility:
//   - Start generates a CA, a serving certificate for 127.0.0.1/localhost and
//     a service-account key pair in Go, picks free loopback ports (retrying
//     with fresh ports when another process wins the race for one), starts
//     etcd, then kube-apiserver, and polls /readyz until a deadline.
//   - The admin identity is a bearer token for the user "admin", group
//     system:masters; RESTConfig, Client and KubeconfigPath all use it.
//     Authorization is RBAC, so other identities are tested through
//     impersonation.
//   - No controller runs unless a test asks for one with
//     StartControllerManager: by default no garbage collector but the one
//     under test ever touches an object.
//   - Teardown (t.Cleanup) stops every process it started: SIGTERM to the
//     process group, SIGKILL after Options.StopTimeout, wait for the exit;
//     then the temp dir is removed. Children also get SIGKILL if the test
//     binary dies (Pdeathsig), and temp dirs of dead test processes are swept
//     at the next Start.
//   - StopAPIServer / StartAPIServer take kube-apiserver away and bring it
//     back on the same port; while it is stopped the port stays bound (not
//     listening) by the harness, so connections are refused and no other test
//     is handed the port as a free one.
//   - APIServerRequests reads apiserver_request_total from kube-apiserver's
//     own /metrics, for counting requests per collected object.
//
// Invariants: a Cluster belongs to the test that started it; its methods may
// be called from that test's goroutines (one mutex guards the process
// handles). URL, Token and the ports never change after Start returns:
// StartAPIServer restarts kube-apiserver on the same port, against the same
// etcd, with the same certificates and token. Each child process is watched
// by exactly one goroutine, locked to the OS thread that forked it, which
// reaps it and closes its done channel.
package cluster
