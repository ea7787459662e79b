package agent_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// TestPlanShowsContainerBytes: `nodegc plan` on a real containerd node
// shows, for a dead container the per-container limit removes, the bytes of
// its writable layer (containerd's snapshot usage) and of its log, within
// 5% of what it wrote, and the container collector's totals.
func TestPlanShowsContainerBytes(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2})
	ctx := t.Context()
	img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "plan/bytes", Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, img.Ref); err != nil {
		t.Fatal(err)
	}
	pod, err := n.RunPod(ctx, node.PodSpec{Name: "bytes", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	const layer, log = 4 << 20, 512 << 10
	var ids []string
	for attempt, args := range [][]string{{"write", "/data", strconv.Itoa(layer), "log", strconv.Itoa(log), "exit", "0"}, {"exit", "0"}} {
		id, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "app", Image: img.Ref, Args: args, Attempt: uint32(attempt)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.WaitContainerState(ctx, id, runtimeapi.ContainerState_CONTAINER_EXITED, time.Minute); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cfg := nodeConfig(t, n.Endpoint, t.TempDir(), nil, []string{"highThresholdPercent: 100"},
		[]string{"podLogsDirectory: " + n.PodLogs, "containerLogsDirectory: " + t.TempDir(), "maxPerPodContainer: 1", "minAge: 0s"})
	stdout, _ := runPlan(t, cfg, "KUBECONFIG=/nonexistent")
	var view struct {
		Containers []struct {
			Action             string  `json:"action"`
			ID                 string  `json:"id"`
			Bytes              *uint64 `json:"bytes"`
			WritableLayerBytes *uint64 `json:"writableLayerBytes"`
			LogBytes           *uint64 `json:"logBytes"`
		} `json:"containers"`
		ContainerBytes struct {
			WritableLayerBytes    uint64 `json:"writableLayerBytes"`
			ContainerLogBytes     uint64 `json:"containerLogBytes"`
			TotalBytes            uint64 `json:"totalBytes"`
			WritableLayersUnknown string `json:"writableLayersUnknown"`
		} `json:"containerBytes"`
	}
	if err := json.Unmarshal(stdout, &view); err != nil {
		t.Fatalf("nodegc plan -o json: %v\n%s", err, string(stdout))
	}
	near := func(what string, got uint64, want int) {
		t.Helper()
		if d := float64(got)/float64(want) - 1; d > 0.05 || d < -0.05 {
			t.Errorf("%s: %d bytes, want %d within 5%%\n%s", what, got, want, string(stdout))
		}
	}
	var removed int
	for _, c := range view.Containers {
		if c.Action != "remove" {
			continue
		}
		removed++
		if !strings.HasPrefix(ids[0], c.ID) || c.Bytes == nil || c.WritableLayerBytes == nil || c.LogBytes == nil {
			t.Fatalf("removal %+v, want attempt 0 (%s) with its bytes\n%s", c, ids[0], string(stdout))
		}
		t.Logf("nodegc plan: container %s frees %d bytes (writable layer %d for %d written, log %d for %d written)",
			c.ID, *c.Bytes, *c.WritableLayerBytes, layer, *c.LogBytes, log)
		near("writable layer", *c.WritableLayerBytes, layer)
		near("log", *c.LogBytes, log)
		if *c.Bytes != *c.WritableLayerBytes+*c.LogBytes {
			t.Errorf("bytes %d, want writable layer + log = %d", *c.Bytes, *c.WritableLayerBytes+*c.LogBytes)
		}
	}
	if removed != 1 {
		t.Fatalf("%d removals, want attempt 0 only\n%s", removed, string(stdout))
	}
	b := view.ContainerBytes
	if b.WritableLayersUnknown != "" {
		t.Errorf("writable layers unknown on containerd: %s", b.WritableLayersUnknown)
	}
	near("total writable layers", b.WritableLayerBytes, layer)
	near("total", b.TotalBytes, layer+log)
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

// TestPlanShowsACollectionUnderWay: on a real containerd node whose image
// filesystem is between the thresholds, `nodegc plan` removes nothing now
// and shows what the agent removes if a collection is under way (usage
// reached high and has not been under low since): the unused image.
func TestPlanShowsACollectionUnderWay(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: 128 << 20})
	ctx := t.Context()
	img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "plan/tolow", Tag: "v1", Layers: []registry.LayerSpec{{Size: 24 << 20, Seed: "tolow"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, img.Ref); err != nil {
		t.Fatal(err)
	}
	type diskJSON struct {
		UsagePercent int `json:"usagePercent"`
		IfCollecting *struct {
			BytesToFree uint64   `json:"bytesToFree"`
			Remove      []string `json:"remove"`
		} `json:"ifCollecting"`
	}
	plan := func(high, low int) (diskJSON, []string) {
		t.Helper()
		cfg := nodeConfig(t, n.Endpoint, t.TempDir(), nil,
			[]string{"highThresholdPercent: " + strconv.Itoa(high), "lowThresholdPercent: " + strconv.Itoa(low), "minimumGCAge: 0s"}, nil)
		stdout, _ := runPlan(t, cfg, "KUBECONFIG=/nonexistent")
		var view struct {
			Disk   diskJSON `json:"imageFilesystem"`
			Images []struct {
				Action string `json:"action"`
			} `json:"images"`
		}
		if err := json.Unmarshal(stdout, &view); err != nil {
			t.Fatalf("nodegc plan -o json: %v\n%s", err, string(stdout))
		}
		var actions []string
		for _, i := range view.Images {
			actions = append(actions, i.Action)
		}
		return view.Disk, actions
	}
	disk, _ := plan(100, 99)
	u := disk.UsagePercent
	if u < 10 || u > 95 {
		t.Fatalf("usage %d%% with a 24 MiB image on 128 MiB: the test needs it between 10%% and 95%%", u)
	}
	disk, actions := plan(u+3, u-3)
	t.Logf("usage %d%%, high %d%%, low %d%%: actions %v, if collecting %+v", u, u+3, u-3, actions, disk.IfCollecting)
	if slices.Contains(actions, "remove") {
		t.Errorf("between the thresholds the plan removes now: %v", actions)
	}
	if disk.IfCollecting == nil || disk.IfCollecting.BytesToFree == 0 || len(disk.IfCollecting.Remove) != 1 ||
		!strings.Contains(disk.IfCollecting.Remove[0], "plan/tolow:v1") {
		t.Errorf("if a collection is under way: %+v, want plan/tolow:v1 removed", disk.IfCollecting)
	}
	if disk, _ := plan(u+6, u+3); disk.IfCollecting != nil {
		t.Errorf("under the low threshold: if collecting %+v, want none", disk.IfCollecting)
	}
}
