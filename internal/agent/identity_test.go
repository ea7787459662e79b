package agent

import (
	"os"
	"strings"
	"testing"
)

// TestIdentityNamesThePod: the Lease identity begins with the pod's name
// (POD_NAME), which nodegc explain tells to kubectl exec into when asked of
// an instance that does not lead. The DaemonSet runs on the host's
// network, where the host name is the node's: before, explain named a pod
// that does not exist. Without POD_NAME, the host name.
func TestIdentityNamesThePod(t *testing.T) {
	t.Setenv("POD_NAME", "nodegc-node-x7k2p")
	a, b := defaultIdentity(), defaultIdentity()
	if pod, _, _ := strings.Cut(a, "_"); pod != "nodegc-node-x7k2p" || a == b {
		t.Errorf("identities %q and %q; want two, each the pod's name, _ and a unique suffix", a, b)
	}
	t.Setenv("POD_NAME", "")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if pod, _, _ := strings.Cut(defaultIdentity(), "_"); pod != host {
		t.Errorf("without POD_NAME: identity begins %q, want the host name %q", pod, host)
	}
}
