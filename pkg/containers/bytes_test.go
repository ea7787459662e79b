package containers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nodegc/nodegc/pkg/diskstats"
)

// fakeLayers is a writable-layer source of fixed sizes; an ID in fail
// fails.
type fakeLayers struct {
	size map[string]uint64
	fail map[string]bool
}

func (l fakeLayers) WritableLayer(_ context.Context, id string) (uint64, error) {
	if l.fail[id] {
		return 0, errors.New("snapshot usage failed")
	}
	return l.size[id], nil
}

// writeFile writes n bytes (real data: blocks are allocated) to path.
func writeFile(t *testing.T, path string, n int) {
	t.Helper()
	mkdirs(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(strings.Repeat("x", n)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// du is the allocated bytes of everything under dir, dir included.
func du(t *testing.T, dir string) uint64 {
	t.Helper()
	n, err := treeBytes(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSizerCountsEachByteOnce: a gone pod's log directory holds the logs
// of its two planned containers (one rotated, one compressed) and the log
// of a container the runtime no longer has. The containers count their own
// files, the directory the rest: together exactly the directory's blocks.
// Writable layers come from the source; one that cannot be read counts 0
// and is counted as a failure.
func TestSizerCountsEachByteOnce(t *testing.T) {
	f := newExecFixture(t)
	logOf := func(pod, name string) string {
		return filepath.Join(f.paths.PodLogs, "ns_"+pod+"_"+pod, name, "0.log")
	}
	writeFile(t, logOf("gone", "a"), 40_000)
	writeFile(t, logOf("gone", "a")+".20250101-000000.gz", 9_000)
	writeFile(t, logOf("gone", "b"), 70_000)
	writeFile(t, filepath.Join(f.goneDir, "c", "0.log"), 100_000) // its container is gone already
	writeFile(t, logOf("p", "a"), 30_000)
	before := du(t, f.goneDir)

	plan := f.plan(t)
	s := sizer{rt: f.rt, paths: f.paths, layers: fakeLayers{
		size: map[string]uint64{"gone/a/0": 1 << 20, "p/a/0": 2 << 20, "gone/sb0": 4096},
		fail: map[string]bool{"gone/b/0": true},
	}}
	s.size(t.Context(), plan)

	got := map[string][2]uint64{}
	for _, d := range plan.RemoveContainers {
		got[d.Container.ID] = [2]uint64{d.WritableLayerBytes, d.LogBytes}
	}
	for _, d := range plan.RemoveSandboxes {
		got[d.Sandbox.ID] = [2]uint64{d.WritableLayerBytes}
	}
	for _, d := range plan.RemoveLogDirs {
		got[d.Dir.Name] = [2]uint64{0, d.Bytes}
	}
	alloc := func(paths ...string) uint64 {
		var n uint64
		for _, p := range paths {
			b, ok := allocated(p)
			if !ok {
				t.Fatalf("cannot stat %s", p)
			}
			n += b
		}
		return n
	}
	goneA := alloc(logOf("gone", "a"), logOf("gone", "a")+".20250101-000000.gz")
	goneB := alloc(logOf("gone", "b"))
	want := map[string][2]uint64{
		"gone/a/0":     {1 << 20, goneA},
		"gone/b/0":     {0, goneB}, // its layer could not be read
		"p/a/0":        {2 << 20, alloc(logOf("p", "a"))},
		"gone/sb0":     {4096, 0},
		"ns_gone_gone": {0, before - goneA - goneB},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bytes per removal (-want +got):\n%s", diff)
	}
	if s.failed != 1 {
		t.Errorf("failures counted: %d, want 1 (the layer that could not be read)", s.failed)
	}
	if b := plan.Bytes(); b.ContainerLogs+b.PodLogDirectory-alloc(logOf("p", "a")) != before {
		t.Errorf("the gone pod's logs count %d bytes in all, its directory holds %d", b.ContainerLogs+b.PodLogDirectory-alloc(logOf("p", "a")), before)
	}
	if b := plan.Bytes(); b.WritableLayer != 3<<20+4096 {
		t.Errorf("plan's writable layers: %d bytes, want %d", b.WritableLayer, 3<<20+4096)
	}
}

// TestSizerLogsOutsidePodLogsCountZero: a log path outside the pod logs
// directory is left alone by the executor, so it frees nothing.
func TestSizerLogsOutsidePodLogsCountZero(t *testing.T) {
	rt := newFakeRuntime()
	elsewhere := filepath.Join(t.TempDir(), "app.log")
	writeFile(t, elsewhere, 50_000)
	c := dead("gone", "app", 0, time.Hour)
	rt.addContainer(c, elsewhere)
	plan := &Plan{RemoveContainers: []ContainerDecision{{Container: c, Reason: ReasonPodGone}}}
	s := sizer{rt: rt, paths: logPaths{PodLogs: t.TempDir()}}
	s.size(t.Context(), plan)
	if b := plan.Bytes(); b != (Bytes{}) || s.failed != 0 {
		t.Errorf("bytes %+v, failures %d; want none", b, s.failed)
	}
}

// TestOutcomeBytesCountsWhatSucceeded: the outcome counts the plan's bytes
// of the removals that succeeded; a container gone before its removal
// frees nothing of nodegc's doing; a failed one counts nothing, nor does
// the sandbox and log directory that then stay.
func TestOutcomeBytesCountsWhatSucceeded(t *testing.T) {
	f := newExecFixture(t)
	plan := f.plan(t)
	for i := range plan.RemoveContainers {
		plan.RemoveContainers[i].WritableLayerBytes, plan.RemoveContainers[i].LogBytes = 1000, 100
	}
	for i := range plan.RemoveSandboxes {
		plan.RemoveSandboxes[i].WritableLayerBytes = 10
	}
	for i := range plan.RemoveLogDirs {
		plan.RemoveLogDirs[i].Bytes = 1
	}
	if got, want := plan.Bytes(), (Bytes{WritableLayer: 3010, ContainerLogs: 300, PodLogDirectory: 1}); got != want {
		t.Errorf("plan bytes %+v, want %+v", got, want)
	}
	f.rt.fail["RemoveContainer gone/b/0"] = errors.New("boom")
	f.rt.fail["ContainerStatus p/a/0"] = status.Error(codes.NotFound, "gone")
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err == nil {
		t.Fatal("want the failed removal's error")
	}
	// gone/a/0 removed; p/a/0 was gone already; gone/b/0 failed, so its
	// sandbox and the log directory stay.
	if got, want := out.Bytes(), (Bytes{WritableLayer: 1000, ContainerLogs: 100}); got != want {
		t.Errorf("outcome bytes %+v, want %+v", got, want)
	}
	dry, _ := execute(t.Context(), newFakeRuntime(), plan, f.paths, true)
	if dry.Bytes() != plan.Bytes() {
		t.Errorf("dry-run outcome bytes %+v, want the plan's %+v", dry.Bytes(), plan.Bytes())
	}
}

// TestBytesMetrics: both byte counters list their label values in their
// Help and export each at 0; a real outcome adds its bytes per kind, a
// dry run nothing; measured growth adds, shrinkage and unmeasured
// filesystems do not.
func TestBytesMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := newMetrics(reg)
	want := `
# HELP nodegc_container_gc_bytes_freed_total Bytes freed by the container GC's removals that succeeded, as estimated when planning (writable layers: the runtime's snapshot usage, 0 where it is unknown; container logs: allocated blocks), pod log directories as they were right before their removal (allocated blocks), by kind (writable_layer, container_logs, pod_log_directory).
# TYPE nodegc_container_gc_bytes_freed_total counter
nodegc_container_gc_bytes_freed_total{kind="container_logs"} 0
nodegc_container_gc_bytes_freed_total{kind="pod_log_directory"} 0
nodegc_container_gc_bytes_freed_total{kind="writable_layer"} 0
# HELP nodegc_container_gc_measured_bytes_freed_total Growth of a filesystem's available bytes from before a container GC run planned to after its removals settled, summed over runs that removed something (negative changes count as 0); it includes whatever else changed on that filesystem meanwhile, by filesystem (writable_layers, pod_logs, writable_layers_and_pod_logs).
# TYPE nodegc_container_gc_measured_bytes_freed_total counter
nodegc_container_gc_measured_bytes_freed_total{filesystem="pod_logs"} 0
nodegc_container_gc_measured_bytes_freed_total{filesystem="writable_layers"} 0
nodegc_container_gc_measured_bytes_freed_total{filesystem="writable_layers_and_pod_logs"} 0
`
	names := []string{"nodegc_container_gc_bytes_freed_total", "nodegc_container_gc_measured_bytes_freed_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	out := &Outcome{
		Containers: []ContainerDecision{{WritableLayerBytes: 5, LogBytes: 7}, {WritableLayerBytes: 11}},
		Sandboxes:  []SandboxDecision{{WritableLayerBytes: 13}},
		LogDirs:    []LogDirDecision{{Bytes: 17}},
	}
	m.observeOutcome(out)
	m.observeOutcome(&Outcome{DryRun: true, Containers: out.Containers})
	m.observeFilesystems([]FilesystemChange{
		{Filesystem: FSWritableLayers, Measured: true, MeasuredFreed: 1000},
		{Filesystem: FSPodLogs, Measured: true, MeasuredFreed: -50},
		{Filesystem: FSWritableLayersAndPodLogs, MeasuredFreed: 99}, // not measured
	})
	for label, wantN := range map[string]float64{
		KindWritableLayer: 29, KindContainerLogs: 7, KindPodLogDirectory: 17,
	} {
		if got := testutil.ToFloat64(m.bytesFreed.WithLabelValues(label)); got != wantN {
			t.Errorf("bytes_freed_total{kind=%q} = %v, want %v", label, got, wantN)
		}
	}
	for label, wantN := range map[string]float64{FSWritableLayers: 1000, FSPodLogs: 0, FSWritableLayersAndPodLogs: 0} {
		if got := testutil.ToFloat64(m.bytesMeasured.WithLabelValues(label)); got != wantN {
			t.Errorf("measured_bytes_freed_total{filesystem=%q} = %v, want %v", label, got, wantN)
		}
	}
}

// fixedDisk reports the same statistics for every path.
type fixedDisk struct{ available uint64 }

func (d fixedDisk) Stat(string) (diskstats.Stats, error) {
	return diskstats.Stats{Capacity: 10 * d.available, Available: d.available}, nil
}

// TestFilesystemsMeasuredOnce: where the runtime's writable layers and the
// pod logs share a filesystem it is measured once, as both; on two
// filesystems each is measured; a runtime that reports no filesystem leaves
// only the pod logs'.
func TestFilesystemsMeasuredOnce(t *testing.T) {
	dir := t.TempDir()
	podLogs, layers := filepath.Join(dir, "pods"), filepath.Join(dir, "layers")
	mkdirs(t, podLogs, layers)
	for name, tc := range map[string]struct {
		imageFs string
		want    []string
	}{
		"one filesystem":        {layers, []string{FSWritableLayersAndPodLogs + " " + layers}},
		"two filesystems":       {"/proc", []string{FSWritableLayers + " /proc", FSPodLogs + " " + podLogs}},
		"no runtime mountpoint": {"", []string{FSPodLogs + " " + podLogs}},
	} {
		t.Run(name, func(t *testing.T) {
			rt := newFakeRuntime()
			rt.imageFs = tc.imageFs
			m := &Manager{opts: Options{Runtime: rt, Disk: fixedDisk{available: 1 << 30}}, paths: logPaths{PodLogs: podLogs}}
			var got []string
			for _, f := range m.filesystems(t.Context()) {
				if f.Before.Available != 1<<30 || f.Measured {
					t.Errorf("%s: before %d, measured %v; want the reading before, not yet measured", f.Filesystem, f.Before.Available, f.Measured)
				}
				got = append(got, f.Filesystem+" "+f.Path)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("filesystems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOutcomeCountsLogsOfAContainerGoneMeanwhile: a planned container
// removed between plan and removal by something that leaves its logs
// (crictl rm) is skipped, and frees nothing of its own; its log files go
// with its pod's log directory, which counts them. Every byte the run frees
// of the gone pod's logs is counted once: the containers removed count
// theirs, the directory the rest, together what the directory held.
func TestOutcomeCountsLogsOfAContainerGoneMeanwhile(t *testing.T) {
	f := newExecFixture(t)
	logOf := func(name string) string { return filepath.Join(f.goneDir, name, "0.log") }
	writeFile(t, logOf("a"), 40_000)
	writeFile(t, logOf("a")+".20250101-000000.gz", 9_000)
	writeFile(t, logOf("b"), 70_000)
	writeFile(t, logOf("c"), 100_000) // its container is gone already
	plan := f.plan(t)
	s := sizer{rt: f.rt, paths: f.paths}
	s.size(t.Context(), plan)
	held := du(t, f.goneDir)

	// crictl rm gone/a/0, between plan and removal: its logs stay.
	f.rt.mu.Lock()
	delete(f.rt.containers, "gone/a/0")
	f.rt.mu.Unlock()
	out, err := execute(t.Context(), f.rt, plan, f.paths, false)
	if err != nil {
		t.Fatal(err)
	}
	if exists(f.goneDir) {
		t.Fatalf("%s is still there", f.goneDir)
	}
	if diff := cmp.Diff([]Skip{{Kind: "container", ID: "gone/a/0", Why: SkipGone}}, out.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	var containerLogs, dir uint64
	for _, d := range out.Containers {
		if d.Container.PodUID == "gone" {
			containerLogs += d.LogBytes
		}
	}
	for _, d := range out.LogDirs {
		dir += d.Bytes
	}
	if containerLogs+dir != held {
		t.Errorf("the gone pod's logs: containers %d + directory %d = %d bytes counted, the directory held %d (off by %d)",
			containerLogs, dir, containerLogs+dir, held, int64(held)-int64(containerLogs+dir))
	}
}
