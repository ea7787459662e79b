package agent_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestPlanWritesNothing: `nodegc plan` on a real containerd node whose
// nodegc state file is corrupt reports the plan and leaves the state
// directory exactly as it was: the corrupt file is not set aside, nothing
// is created. (The agent, `nodegc run`, sets such a file aside; plan only
// reads and reports.)
func TestPlanWritesNothing(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: 128 << 20})
	ctx := t.Context()
	img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "plan/app", Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, img.Ref); err != nil {
		t.Fatal(err)
	}
	stateDir, podLogs, links := t.TempDir(), t.TempDir(), t.TempDir()
	corrupt := []byte(`{"version": 1, "images": {"sha256:x": `)
	if err := os.WriteFile(filepath.Join(stateDir, images.StateFileName), corrupt, 0o600); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, stateDir)
	cfg := nodeConfig(t, n.Endpoint, stateDir, nil, []string{"highThresholdPercent: 1", "lowThresholdPercent: 0", "minimumGCAge: 0s"},
		[]string{"podLogsDirectory: " + podLogs, "containerLogsDirectory: " + links})
	stdout, stderr := runPlan(t, cfg, "KUBECONFIG=/nonexistent")
	var view struct {
		Images []struct {
			Tags   []string `json:"tags"`
			Action string   `json:"action"`
		} `json:"images"`
	}
	if err := json.Unmarshal(stdout, &view); err != nil {
		t.Fatalf("nodegc plan -o json: %v\n%s", err, string(stdout))
	}
	if len(view.Images) == 0 {
		t.Fatalf("the plan lists no image:\n%s", string(stdout))
	}
	if diff := cmp.Diff(before, snapshotDir(t, stateDir)); diff != "" {
		t.Errorf("nodegc plan changed the state directory (-before +after):\n%s\nstderr:\n%s", diff, stderr)
	}
}

// snapshotDir maps every file under dir to its content.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
