package images

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestMaxAgeCountsOnlyWatchedTime: maximumGCAge (2h here) removes an image
// unused for longer, but nodegc knows only the uses it saw: while it did
// not watch (the agent down), a pod may have run the image and gone. An
// image last used 3h ago by the state file, after nodegc was down for those
// 3h, is kept until 2h after the start, as the kubelet counts from its own
// start; after a restart within a minute (a rollout), the state file's
// times stand and it goes at once; a state file that does not say how long
// nodegc watched counts as a gap. (The image was removed at start in every
// case: the first run trusted the file's 3-hour-old last use.)
func TestMaxAgeCountsOnlyWatchedTime(t *testing.T) {
	start := t0.Add(30 * 24 * time.Hour)
	for name, tc := range map[string]struct {
		since, until time.Time // the state file's watch; zero: not written
		wantAtStart  bool      // removed by the first run
	}{
		"down for 3 hours":     {since: start.Add(-10 * 24 * time.Hour), until: start.Add(-3 * time.Hour)},
		"restarted at once":    {since: start.Add(-10 * 24 * time.Hour), until: start.Add(-10 * time.Second), wantAtStart: true},
		"older file, no watch": {},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeState(t, dir, stateFile{Version: stateVersion, Node: "node-a", WatchedSince: tc.since, WatchedUntil: tc.until,
				Images: map[string]Usage{"sha256:aa": {FirstDetected: start.Add(-20 * 24 * time.Hour), LastUsed: start.Add(-3 * time.Hour)}}})
			rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/job:1"}, Size: mib}}}
			cfg := policyConfig()
			cfg.MaximumGCAge = &metav1.Duration{Duration: 2 * time.Hour}
			cfg.HighThresholdPercent = ptr.To[int32](100) // the age rule alone
			clk := clocktesting.NewFakeClock(start)
			m, err := NewManager(Options{Config: cfg, StateDirectory: dir, NodeName: "node-a", Runtime: rt,
				Disk: statsDisk{Capacity: 100 * mib, Available: 90 * mib}, Clock: clk, SettleTimeout: noSettle})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.GarbageCollect(t.Context(), TriggerPeriodic); err != nil {
				t.Fatal(err)
			}
			if got := len(rt.removed) == 1; got != tc.wantAtStart {
				t.Fatalf("removed by the run at start: %v, want %v", got, tc.wantAtStart)
			}
			if tc.wantAtStart {
				return
			}
			clk.SetTime(start.Add(2*time.Hour - time.Second))
			if _, err := m.GarbageCollect(t.Context(), TriggerPeriodic); err != nil || len(rt.removed) != 0 {
				t.Fatalf("2h - 1s after the start: removed %v (err %v), want it kept", rt.removed, err)
			}
			clk.SetTime(start.Add(2*time.Hour + time.Second))
			if _, err := m.GarbageCollect(t.Context(), TriggerPeriodic); err != nil || len(rt.removed) != 1 {
				t.Errorf("2h + 1s after the start, unused since: removed %v (err %v), want it removed", rt.removed, err)
			}
		})
	}
}

// writeState writes sf as the state file in dir.
func writeState(t *testing.T, dir string, sf stateFile) {
	t.Helper()
	data, err := json.Marshal(sf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWatchGoesOnAcrossQuickRestarts: the final save at shutdown dates the
// end of the watch even when no record changed; a start within a minute of
// it goes on with the same watch, one later begins a new one, and so does
// a start after a crash whose last write is older.
func TestWatchGoesOnAcrossQuickRestarts(t *testing.T) {
	dir := t.TempDir()
	at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }
	first, warn := newTracker(dir, t0, false, "node-a")
	if warn != nil {
		t.Fatal(warn)
	}
	if !first.watchedSince.Equal(t0) {
		t.Fatalf("no state: watch since %v, want the start %v", first.watchedSince, t0)
	}
	first.clock = at(time.Hour)
	if wrote, err := first.saveFinal(); err != nil || !wrote {
		t.Fatalf("final save with nothing changed: wrote %v, err %v; want it written", wrote, err)
	}
	second, _ := newTracker(dir, t0.Add(time.Hour+30*time.Second), false, "node-a")
	if !second.watchedSince.Equal(t0) {
		t.Errorf("restarted 30s after the last save: watch since %v, want the first watch's %v", second.watchedSince, t0)
	}
	second.clock = at(2 * time.Hour)
	if _, err := second.saveFinal(); err != nil {
		t.Fatal(err)
	}
	late := t0.Add(2*time.Hour + watchGapCovered + time.Second)
	third, _ := newTracker(dir, late, false, "node-a")
	if !third.watchedSince.Equal(late) {
		t.Errorf("restarted %v after the last save: watch since %v, want a new watch from %v", watchGapCovered+time.Second, third.watchedSince, late)
	}
}

// TestSetAsideStateFilesKeptFew: every state file set aside (corrupt, or of
// another node) used to stay for good, up to 64 MB each: a node whose state
// is set aside at every start (a template's file restored by a
// configuration manager) filled its state directory. The newest
// keptAside of each kind stay, the one just set aside among them; other
// files are not touched. The one just set aside stays also when the clock
// is behind the others' names (a node booted with its clock in 1970):
// before, its name sorted first and it was removed at once.
func TestSetAsideStateFilesKeptFew(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  time.Time
		want []string // the corrupt files left
	}{
		{"clock right", time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), []string{"20260104T000000Z", "20260105T000000Z", "20261129T120000Z"}},
		{"clock behind", time.Date(1970, 1, 1, 0, 5, 0, 0, time.UTC), []string{"19700101T000500Z", "20260104T000000Z", "20260105T000000Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) { setAsideKeptFew(t, tc.now, tc.want) })
	}
}

func setAsideKeptFew(t *testing.T, now time.Time, corrupt []string) {
	dir := t.TempDir()
	for i := range 5 {
		for _, kind := range []string{"corrupt", "othernode"} {
			name := fmt.Sprintf("%s.%s-202601%02dT000000Z", StateFileName, kind, i+1)
			if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "unrelated"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, warn := loadState(dir, now, false, "node-a"); warn == nil {
		t.Fatal("a corrupt state file loaded without a warning")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	var want []string
	for _, at := range corrupt {
		want = append(want, StateFileName+".corrupt-"+at)
	}
	want = append(want, StateFileName+".othernode-20260103T000000Z", StateFileName+".othernode-20260104T000000Z", StateFileName+".othernode-20260105T000000Z",
		"unrelated")
	if !slices.Equal(left, want) {
		t.Errorf("files left in the state directory:\n%q\nwant\n%q", left, want)
	}
}

// TestSetAsideTwiceInOneSecond: a state file set aside in the second
// another was (a crash loop restoring a bad file) takes another name;
// before, the rename replaced the first.
func TestSetAsideTwiceInOneSecond(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, content := range []string{"first", "second"} {
		if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, _, warn := loadState(dir, now, false, "node-a"); warn == nil {
			t.Fatal("a corrupt state file loaded without a warning")
		}
	}
	var got []string
	aside, _ := filepath.Glob(filepath.Join(dir, StateFileName+".corrupt-*"))
	for _, p := range aside {
		data, _ := os.ReadFile(p)
		got = append(got, filepath.Base(p)+"="+string(data))
	}
	want := []string{StateFileName + ".corrupt-20261129T120000Z=first", StateFileName + ".corrupt-20261129T120000Z-2=second"}
	if !slices.Equal(got, want) {
		t.Errorf("set aside: %q, want %q", got, want)
	}
}

// TestPlanReadsTheAgentsWatch: `nodegc plan` beside a running agent reads
// its state, which the agent writes only on changes: its last write may be
// hours ago while its watch goes on, and the plan takes the file's watch as
// it is. With no agent running, the plan counts the watch as an agent
// starting now would (a new one, 3 hours after the last write). Either way
// it writes nothing. An agent starting then begins a new watch, and
// writes it with its next save, so that the file no longer says the old.
func TestPlanReadsTheAgentsWatch(t *testing.T) {
	dir := t.TempDir()
	since := t0.Add(-10 * 24 * time.Hour)
	writeState(t, dir, stateFile{Version: stateVersion, Node: "node-a", WatchedSince: since, WatchedUntil: t0.Add(-3 * time.Hour),
		Images: map[string]Usage{}})
	for _, running := range []bool{true, false} {
		m, err := NewManager(Options{Config: policyConfig(), StateDirectory: dir, NodeName: "node-a", Runtime: &streamRuntime{},
			Disk: fixedDisk{}, Clock: clocktesting.NewFakeClock(t0), PlanOnly: true, WatchGoesOn: running})
		if err != nil {
			t.Fatal(err)
		}
		want := t0
		if running {
			want = since
		}
		if !m.tracker.watchedSince.Equal(want) {
			t.Errorf("plan, an agent running %v: watch since %v, want %v", running, m.tracker.watchedSince, want)
		}
		if wrote, err := m.tracker.saveFinal(); wrote || err != nil {
			t.Errorf("plan-only final save: wrote %v, err %v; want nothing written", wrote, err)
		}
	}
	agent, _ := newTracker(dir, t0, false, "node-a")
	if !agent.watchedSince.Equal(t0) {
		t.Errorf("an agent starting 3h after the last write: watch since %v, want a new one from %v", agent.watchedSince, t0)
	}
	agent.clock = func() time.Time { return t0.Add(time.Second) }
	if wrote, err := agent.save(); !wrote || err != nil {
		t.Fatalf("the agent's first save after a new watch began: wrote %v, err %v; want the new watch written", wrote, err)
	}
	if _, _, file, _ := loadState(dir, t0.Add(2*time.Second), true, "node-a"); !file.since.Equal(t0) {
		t.Errorf("the file's watch since %v after the save, want the new watch's %v", file.since, t0)
	}
}
