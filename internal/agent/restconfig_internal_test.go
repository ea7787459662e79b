package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestRestConfigInPodWithoutToken: in a pod whose service-account token is
// not mounted (automountServiceAccountToken: false), with no kubeconfig,
// the agent runs node-only, as it does outside a cluster, instead of
// refusing to start: KUBERNETES_SERVICE_HOST is set in every pod, so the
// operator has no other way to ask for node-only in a pod.
func TestRestConfigInPodWithoutToken(t *testing.T) {
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Skip("a service-account token is mounted here")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	rc, nodeOnly, err := restConfig("", config.Defaulted())
	if rc != nil || err != nil || !strings.Contains(nodeOnly, "in a pod without a service-account token (automountServiceAccountToken: false)") {
		t.Errorf("restConfig in a pod without a token = %v, %q, %v; want node-only, saying why", rc, nodeOnly, err)
	}

	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if rc, nodeOnly, err := restConfig("", config.Defaulted()); rc != nil || err != nil || nodeOnly != "no kubeconfig and not in a cluster" {
		t.Errorf("restConfig outside a cluster = %v, %q, %v; want node-only, saying why", rc, nodeOnly, err)
	}
}
