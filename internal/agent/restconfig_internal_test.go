package agent

import (
	"os"
	"path/filepath"
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

// TestRestConfigMissingKubeconfigNamesItsSource: a kubeconfig that cannot
// be read stops the agent with an error that says where the path came from
// (the --kubeconfig flag, or clientConnection.kubeconfig in the
// configuration file) and what to do, rather than the path alone: an
// operator who set neither on the command line would look for the flag.
func TestRestConfigMissingKubeconfigNamesItsSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := config.Defaulted()
	cfg.ClientConnection.Kubeconfig = missing
	for name, tc := range map[string]struct {
		flag string
		cfg  *config.NodeGCConfiguration
		want string
	}{
		"from the configuration file": {cfg: cfg, want: "clientConnection.kubeconfig " + missing},
		"from the flag":               {flag: missing, cfg: config.Defaulted(), want: "--kubeconfig " + missing},
		"the flag wins":               {flag: missing, cfg: cfg, want: "--kubeconfig " + missing},
	} {
		rc, _, err := restConfig(tc.flag, tc.cfg)
		if rc != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "no such file") ||
			!strings.Contains(err.Error(), "in-cluster") {
			t.Errorf("%s: restConfig = %v, %v; want an error naming %q, the cause, and the in-cluster alternative", name, rc, err, tc.want)
		}
	}
}
