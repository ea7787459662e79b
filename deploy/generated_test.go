package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestManifestGeneratedFromChart: deploy/daemonset.yaml is what
// hack/gen-deploy.sh renders from the chart (make manifests).
func TestManifestGeneratedFromChart(t *testing.T) {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(root, "hack", "gen-deploy.sh"), "-")
	cmd.Env = append(helmEnv(t), "HELM="+testbed.Binary(t, "helm"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/gen-deploy.sh: %v: %s", err, stderr.String())
	}
	got, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("deploy/%s is not what the chart deploy/helm/nodegc renders: run make manifests (-generated +file):\n%s", manifest, diff)
	}
}
