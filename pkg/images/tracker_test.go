package images

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func criImage(id string, tags ...string) *runtimeapi.Image {
	return &runtimeapi.Image{Id: id, RepoTags: tags, Size: mib}
}

func criContainer(id, imageRef string, state runtimeapi.ContainerState) *runtimeapi.Container {
	return &runtimeapi.Container{Id: id, ImageRef: imageRef, State: state}
}

// reconcile applies listings of images and containers begun and taken at
// now, as Manager.Plan does.
func reconcile(tr *Tracker, images []*runtimeapi.Image, containers []*runtimeapi.Container, now time.Time) {
	tr.applyContainers(tr.beginListing(), containers)
	tr.applyImages(images, now)
}

func newTestTracker(t *testing.T) (*Tracker, string) {
	t.Helper()
	dir := t.TempDir()
	tr, warn := NewTracker(dir, t0)
	if warn != nil {
		t.Fatalf("NewTracker on an empty dir warned: %v", warn)
	}
	return tr, dir
}

func TestTrackerReconcile(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a", "r/a:1"), criImage("sha256:b", "r/b:1"), criImage("sha256:c", "r/c:1")}
	containers := []*runtimeapi.Container{
		criContainer("c1", "sha256:a", runtimeapi.ContainerState_CONTAINER_RUNNING),
		criContainer("c2", "r/b:1", runtimeapi.ContainerState_CONTAINER_EXITED), // by tag, exited
	}
	reconcile(tr, images, containers, t0)
	reconcile(tr, images, containers[:1], t0.Add(time.Minute)) // c2 removed since

	want := map[string]Usage{
		"sha256:a": {FirstDetected: t0, LastUsed: t0.Add(time.Minute)},
		"sha256:b": {FirstDetected: t0, LastUsed: t0},
		"sha256:c": {FirstDetected: t0},
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	got := map[string]bool{}
	in, _ := tr.planInput(images)
	for _, img := range in {
		got[img.ID] = img.InUse
	}
	if diff := cmp.Diff(map[string]bool{"sha256:a": true, "sha256:b": false, "sha256:c": false}, got); diff != "" {
		t.Errorf("in use (-want +got):\n%s", diff)
	}

	// An image that disappears loses its record.
	reconcile(tr, images[:1], containers[:1], t0.Add(2*time.Minute))
	if _, ok := tr.Usage()["sha256:c"]; ok {
		t.Error("record of a removed image kept")
	}
}

func TestTrackerEvents(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a", "r/a:1"), criImage("sha256:b", "r/b:1")}
	reconcile(tr, images, nil, t0)
	at := t0.Add(30 * time.Second)
	tr.observeEvent(&runtimeapi.ContainerEventResponse{
		ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT, CreatedAt: at.UnixNano(),
		ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: "c1", ImageRef: "sha256:a", Image: &runtimeapi.ImageSpec{Image: "r/a:1"}}},
	})
	imgA := &Image{ID: "sha256:a", RepoTags: []string{"r/a:1"}}
	if !tr.inUse(imgA) {
		t.Fatal("image of a started container not in use")
	}
	if got := tr.Usage()["sha256:a"].LastUsed; !got.Equal(at) {
		t.Errorf("LastUsed after start = %v, want %v", got, at)
	}
	gone := t0.Add(90 * time.Second)
	tr.observeEvent(&runtimeapi.ContainerEventResponse{
		ContainerId: "c1", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT, CreatedAt: gone.UnixNano(),
	})
	if tr.inUse(imgA) {
		t.Error("image still in use after its only container was deleted")
	}
	if got := tr.Usage()["sha256:a"].LastUsed; !got.Equal(gone) {
		t.Errorf("LastUsed after delete = %v, want %v (accurate to the event)", got, gone)
	}
	if got := tr.Usage()["sha256:b"].LastUsed; !got.IsZero() {
		t.Errorf("unused image got LastUsed %v", got)
	}
}

func TestTrackerImagesNewImageIsFresh(t *testing.T) {
	tr, _ := newTestTracker(t)
	now := t0.Add(time.Hour)
	tr.clock = func() time.Time { return now }
	imgs, _ := tr.planInput([]*runtimeapi.Image{criImage("sha256:new")})
	if len(imgs) != 1 || !imgs[0].FirstDetected.Equal(now) {
		t.Errorf("unseen image = %+v, want FirstDetected = now", imgs)
	}
}

// TestStateSurvivesRestart: a new tracker reading the same directory has
// the same first-detected and last-used times.
func TestStateSurvivesRestart(t *testing.T) {
	tr, dir := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a"), criImage("sha256:b")}
	reconcile(tr, images, []*runtimeapi.Container{criContainer("c", "sha256:b", runtimeapi.ContainerState_CONTAINER_EXITED)}, t0)
	if _, err := tr.save(); err != nil {
		t.Fatal(err)
	}
	again, warn := NewTracker(dir, t0.Add(time.Hour))
	if warn != nil {
		t.Fatal(warn)
	}
	if diff := cmp.Diff(tr.Usage(), again.Usage()); diff != "" {
		t.Errorf("usage after restart (-before +after):\n%s", diff)
	}
	// Reconciling later does not move first-detected.
	reconcile(again, images, nil, t0.Add(time.Hour))
	if got := again.Usage()["sha256:a"].FirstDetected; !got.Equal(t0) {
		t.Errorf("FirstDetected after restart and reconcile = %v, want %v", got, t0)
	}
}

func TestCorruptStateIsSetAside(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":         "{not json",
		"unknown version": `{"version": 99, "images": {}}`,
		"wrong shape":     `{"version": 1, "images": ["a"]}`,
		"bad arrival":     `{"version": 1, "images": {"sha256:a": {"firstDetected": "2026-01-01T00:00:00Z", "arrived": "yesterday"}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, StateFileName)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			tr, warn := NewTracker(dir, t0)
			if warn == nil || !strings.Contains(warn.Error(), "moved it to") {
				t.Fatalf("warning = %v, want one saying the file was moved aside", warn)
			}
			if len(tr.Usage()) != 0 {
				t.Error("tracker not empty after a corrupt state file")
			}
			aside, _ := filepath.Glob(p + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("set-aside files = %v, want one", aside)
			}
			if data, _ := os.ReadFile(aside[0]); string(data) != content {
				t.Error("set-aside file does not hold the original content")
			}
			// The tracker goes on and can save a valid file again.
			reconcile(tr, []*runtimeapi.Image{criImage("sha256:a")}, nil, t0)
			if _, err := tr.save(); err != nil {
				t.Fatal(err)
			}
			if _, warn := NewTracker(dir, t0); warn != nil {
				t.Errorf("state written after recovery is not valid: %v", warn)
			}
		})
	}
}

// TestStateOfAnotherNodeIsSetAside: a state file written for another node
// (a disk cloned from a template node, a node renamed) describes another
// node's images: its last-used and first-detected times would have this
// node's images removed as unused for weeks and older than the minimum
// age the moment they are seen. It is set aside, as a corrupt one is, and
// the records start from now; a file of no node (written before nodegc
// kept one) is read, and saved for this node from then on.
func TestStateOfAnotherNodeIsSetAside(t *testing.T) {
	dir := t.TempDir()
	template, warn := newTracker(dir, t0, false, "template-node")
	if warn != nil {
		t.Fatal(warn)
	}
	reconcile(template, []*runtimeapi.Image{criImage("sha256:a")}, []*runtimeapi.Container{criContainer("c", "sha256:a", runtimeapi.ContainerState_CONTAINER_EXITED)}, t0)
	if _, err := template.save(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, StateFileName)
	written, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}

	// nodegc plan reads only: the file stays, the usage reads as empty.
	later := t0.Add(30 * 24 * time.Hour)
	planned, warn := newTracker(dir, later, true, "worker-1")
	if warn == nil || !strings.Contains(warn.Error(), `"template-node"`) || !strings.Contains(warn.Error(), `"worker-1"`) {
		t.Errorf("read-only load of another node's state warned %v, want both node names", warn)
	}
	if len(planned.Usage()) != 0 {
		t.Errorf("read-only load kept another node's usage: %v", planned.Usage())
	}
	if _, err := os.Stat(p); err != nil {
		t.Errorf("read-only load moved the state file: %v", err)
	}

	worker, warn := newTracker(dir, later, false, "worker-1")
	if warn == nil || !strings.Contains(warn.Error(), `"template-node"`) || !strings.Contains(warn.Error(), "moved it to") {
		t.Fatalf("warning = %v, want one naming the other node and where its state went", warn)
	}
	if len(worker.Usage()) != 0 {
		t.Fatalf("another node's usage was kept: %v", worker.Usage())
	}
	aside, _ := filepath.Glob(p + ".*")
	if len(aside) != 1 {
		t.Fatalf("set-aside files = %v, want one", aside)
	} else if data, _ := os.ReadFile(aside[0]); string(data) != string(written) {
		t.Error("set-aside file does not hold the other node's state")
	}
	reconcile(worker, []*runtimeapi.Image{criImage("sha256:a")}, nil, later)
	if got := worker.Usage()["sha256:a"]; !got.FirstDetected.Equal(later) || !got.LastUsed.IsZero() {
		t.Errorf("usage on this node = %+v, want first detected now and never used", got)
	}
	if _, err := worker.save(); err != nil {
		t.Fatal(err)
	}
	if again, warn := newTracker(dir, later, false, "worker-1"); warn != nil || len(again.Usage()) != 1 {
		t.Errorf("this node's own state read back with warning %v and usage %v", warn, again.Usage())
	}

	// A file of no node, as nodegc wrote before it kept one: read, and
	// saved for this node.
	old := `{"version": 1, "images": {"sha256:b": {"firstDetected": "` + t0.UTC().Format(time.RFC3339) + `"}}}`
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	upgraded, warn := newTracker(dir, later, false, "worker-1")
	if warn != nil || !upgraded.Usage()["sha256:b"].FirstDetected.Equal(t0) {
		t.Fatalf("a state file of no node: warning %v, usage %v; want it read", warn, upgraded.Usage())
	}
	if _, err := upgraded.save(); err != nil {
		t.Fatal(err)
	}
	if _, warn := newTracker(dir, later, false, "worker-2"); warn == nil {
		t.Error("a state saved for worker-1 was read for worker-2 without a warning")
	}
}

func TestSaveLeavesNoTempFiles(t *testing.T) {
	tr, dir := newTestTracker(t)
	reconcile(tr, []*runtimeapi.Image{criImage("sha256:a")}, nil, t0)
	for range 3 {
		if _, err := tr.save(); err != nil {
			t.Fatal(err)
		}
		reconcile(tr, []*runtimeapi.Image{criImage("sha256:a")}, []*runtimeapi.Container{criContainer("c", "sha256:a", 0)}, time.Now())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != StateFileName {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("state dir holds %v, want only %s", names, StateFileName)
	}
}

// TestForgetRemovedImage: an image nodegc removed and that is pulled again
// is first detected again, so the minimum age protects it anew.
func TestForgetRemovedImage(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:a")}
	reconcile(tr, images, nil, t0)
	tr.forget("sha256:a")
	later := t0.Add(time.Hour)
	reconcile(tr, images, nil, later)
	if got := tr.Usage()["sha256:a"].FirstDetected; !got.Equal(later) {
		t.Errorf("FirstDetected after removal and re-pull = %v, want %v", got, later)
	}
}

// TestTrackerListingsProperty: whatever sequence of listings (containers
// added, removed, switched to another image, listed in any order) and
// events reaches the tracker, its view of containers and image references
// is the one a new tracker builds from the last listing alone. This covers
// the three ways a listing is applied: unchanged (skipped), changed with no
// event since (only the difference is looked up) and after events (every
// entry looked up).
func TestTrackerListingsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	images := []string{"sha256:a", "sha256:b", "sha256:c", "sha256:d"}
	tr, _ := newTestTracker(t)
	var live []*runtimeapi.Container
	next := 0
	for round := range 300 {
		switch op := rng.IntN(10); {
		case op < 3 && len(live) > 0: // remove some
			for range rng.IntN(3) + 1 {
				if len(live) == 0 {
					break
				}
				k := rng.IntN(len(live))
				live = append(live[:k], live[k+1:]...)
			}
		case op < 6: // add some
			for range rng.IntN(4) + 1 {
				live = append(live, &runtimeapi.Container{Id: fmt.Sprintf("c%d", next), ImageRef: images[rng.IntN(len(images))]})
				next++
			}
		case op < 8 && len(live) > 0: // a container now names another image
			k := rng.IntN(len(live))
			live[k] = &runtimeapi.Container{Id: live[k].Id, ImageRef: images[rng.IntN(len(images))]}
		case op == 8 && len(live) > 0: // an event about a listed container
			c := live[rng.IntN(len(live))]
			tr.observeEvent(&runtimeapi.ContainerEventResponse{ContainerId: c.Id, ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
				CreatedAt: t0.UnixNano(), ContainersStatuses: []*runtimeapi.ContainerStatus{{Id: c.Id, ImageRef: c.ImageRef}}})
		}
		listing := slices.Clone(live)
		rng.Shuffle(len(listing), func(i, j int) { listing[i], listing[j] = listing[j], listing[i] })
		imgs := make([]*runtimeapi.Image, len(images))
		for k, id := range images {
			imgs[k] = &runtimeapi.Image{Id: id}
		}
		reconcile(tr, imgs, listing, t0)

		want, _ := newTestTracker(t)
		reconcile(want, imgs, listing, t0)
		if diff := cmp.Diff(want.refs, tr.refs); diff != "" {
			t.Fatalf("round %d: image references (-fresh tracker +tracker):\n%s", round, diff)
		}
		got := map[string]imageRefs{}
		for id, tc := range tr.containers {
			got[id] = tc.refs
		}
		wantContainers := map[string]imageRefs{}
		for id, tc := range want.containers {
			wantContainers[id] = tc.refs
		}
		if diff := cmp.Diff(wantContainers, got); diff != "" {
			t.Fatalf("round %d: containers (-fresh tracker +tracker):\n%s", round, diff)
		}
	}
}

// TestArrivalsBoundFirstDetected: an image cannot have been seen before it
// arrived: a record older than the runtime's arrival time is of an earlier
// copy (removed and pulled again while nodegc was down) and starts over; a
// record younger than the arrival (nodegc installed later) stays. Each
// record keeps the arrival it was checked against.
func TestArrivalsBoundFirstDetected(t *testing.T) {
	tr, _ := newTestTracker(t)
	images := []*runtimeapi.Image{criImage("sha256:repulled"), criImage("sha256:old"), criImage("sha256:unknown")}
	reconcile(tr, images, nil, t0)
	reconcile(tr, images, []*runtimeapi.Container{criContainer("c", "sha256:repulled", 0), criContainer("d", "sha256:old", 0)}, t0.Add(time.Hour))
	reconcile(tr, images, nil, t0.Add(2*time.Hour))
	arrived := t0.Add(90 * time.Minute)
	tr.observeArrivals(map[string]time.Time{"sha256:repulled": arrived, "sha256:old": t0.Add(-time.Hour), "sha256:gone": arrived}, tr.follow())
	want := map[string]Usage{
		"sha256:repulled": {FirstDetected: arrived, Arrived: arrived},                                    // last used before it arrived: by the earlier copy
		"sha256:old":      {FirstDetected: t0, LastUsed: t0.Add(time.Hour), Arrived: t0.Add(-time.Hour)}, // arrived before nodegc saw it
		"sha256:unknown":  {FirstDetected: t0},
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// TestStateWithoutArrivals: a state file of an older nodegc keeps no
// arrival with its records. Every record loads, and the first arrival read
// is checked against as before (a later one is a copy pulled again); the
// arrival each record was checked against is written, and read back.
func TestStateWithoutArrivals(t *testing.T) {
	dir := t.TempDir()
	data := `{"version": 1, "images": {"sha256:a": {"firstDetected": "2026-01-01T00:00:00Z", "lastUsed": "2026-02-01T00:00:00Z"}, ` +
		`"sha256:b": {"firstDetected": "2026-01-01T00:00:00Z", "lastUsed": "2026-02-01T00:00:00Z"}}}`
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, warn := NewTracker(dir, t0)
	if warn != nil {
		t.Fatal(warn)
	}
	jan, feb, mar := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	tr.observeArrivals(map[string]time.Time{"sha256:a": jan.Add(-time.Hour), "sha256:b": mar}, tr.follow())
	want := map[string]Usage{
		"sha256:a": {FirstDetected: jan, LastUsed: feb, Arrived: jan.Add(-time.Hour)},
		"sha256:b": {FirstDetected: mar, Arrived: mar}, // pulled again in March
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	if _, err := tr.save(); err != nil {
		t.Fatal(err)
	}
	again, warn := NewTracker(dir, t0)
	if warn != nil {
		t.Fatal(warn)
	}
	if diff := cmp.Diff(want, again.Usage()); diff != "" {
		t.Errorf("usage read back (-want +got):\n%s", diff)
	}
}

// TestZeroFirstDetectedInState: a state record with a zero first-detected
// time (hand-edited, or from a buggy version) counts from the load, so the
// minimum age protects the image.
func TestZeroFirstDetectedInState(t *testing.T) {
	dir := t.TempDir()
	data := `{"version": 1, "images": {"sha256:a": {"firstDetected": "0001-01-01T00:00:00Z", "lastUsed": "2026-01-01T00:00:00Z"}, "sha256:b": {"firstDetected": "2026-01-01T00:00:00Z"}}}`
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, warn := NewTracker(dir, t0)
	if warn != nil {
		t.Fatal(warn)
	}
	want := map[string]Usage{
		"sha256:a": {FirstDetected: t0},
		"sha256:b": {FirstDetected: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// TestFutureDatedStateIsClamped: records saved while the wall clock ran
// ahead (a bad RTC or time source, stepped back since) would keep every
// image they date younger than the minimum age, and rank the images used
// then as the most recently used, for as long as the clock was ahead. Times
// after the load count from the load, with a warning that says why.
func TestFutureDatedStateIsClamped(t *testing.T) {
	dir := t.TempDir()
	data := `{"version": 1, "images": {` +
		`"sha256:a": {"firstDetected": "2027-03-01T00:00:00Z", "lastUsed": "2027-03-02T00:00:00Z"}, ` +
		`"sha256:b": {"firstDetected": "2026-01-01T00:00:00Z", "lastUsed": "2027-03-02T00:00:00Z"}, ` +
		`"sha256:c": {"firstDetected": "2026-01-01T00:00:00Z", "lastUsed": "2026-02-01T00:00:00Z"}}}`
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, warn := NewTracker(dir, t0)
	if warn == nil || !strings.Contains(warn.Error(), "2 image records") || !strings.Contains(warn.Error(), "clock") {
		t.Errorf("warning = %v, want one saying 2 image records were dated after the clock", warn)
	}
	jan := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	want := map[string]Usage{
		"sha256:a": {FirstDetected: t0, LastUsed: t0},
		"sha256:b": {FirstDetected: jan, LastUsed: t0},
		"sha256:c": {FirstDetected: jan, LastUsed: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)},
	}
	if diff := cmp.Diff(want, tr.Usage()); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

// TestPollingSavesLastUseEveryStep: where containers are polled (no event
// stream: containerd 1.6, or while the stream is down), every listing sees
// the containers again and moves their images' last-used time to now. The
// state file is written once per lastUsedSaveStep for that, not at every
// listing (it was: a synced write every saveInterval, for ever, on the disk
// nodegc is there to relieve); a save at shutdown writes the latest times.
func TestPollingSavesLastUseEveryStep(t *testing.T) {
	dir := t.TempDir()
	tr, warn := NewTracker(dir, t0)
	if warn != nil {
		t.Fatal(warn)
	}
	imgs := []*runtimeapi.Image{{Id: "sha256:a", RepoTags: []string{"example.com/a:1"}}}
	ctrs := []*runtimeapi.Container{{Id: "c1", ImageRef: "sha256:a", Image: &runtimeapi.ImageSpec{Image: "sha256:a"},
		State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
	poll := func(at time.Time) (wrote bool) {
		t.Helper()
		if _, err := tr.syncContainers(t.Context(), func(context.Context) ([]*runtimeapi.Container, error) { return ctrs, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.syncImages(t.Context(), func(context.Context) ([]*runtimeapi.Image, error) { return imgs, nil },
			func() time.Time { return at }); err != nil {
			t.Fatal(err)
		}
		wrote, err := tr.save()
		if err != nil {
			t.Fatal(err)
		}
		return wrote
	}
	onDisk := func() Usage {
		t.Helper()
		again, warn := NewTracker(dir, t0.Add(time.Hour))
		if warn != nil {
			t.Fatal(warn)
		}
		return again.Usage()["sha256:a"]
	}

	var writes []int // seconds after t0
	for s := range 150 {
		if poll(t0.Add(time.Duration(s) * time.Second)) {
			writes = append(writes, s)
		}
	}
	if want := []int{0, 60, 120}; !slices.Equal(writes, want) {
		t.Errorf("state file written at seconds %v of 150 polls one second apart, want %v", writes, want)
	}
	if got, want := onDisk().LastUsed, t0.Add(120*time.Second); !got.Equal(want) {
		t.Errorf("last use on disk %v, want %v", got, want)
	}

	if wrote, err := tr.saveAll(); err != nil || !wrote {
		t.Fatalf("saveAll (at shutdown) wrote %v, err %v; want the latest last use written", wrote, err)
	}
	if got, want := onDisk().LastUsed, t0.Add(149*time.Second); !got.Equal(want) {
		t.Errorf("last use on disk after saveAll %v, want %v", got, want)
	}
	if wrote, err := tr.saveAll(); err != nil || wrote {
		t.Errorf("saveAll with nothing new wrote %v, err %v; want nothing written", wrote, err)
	}
}

// TestStaleTempFilesRemovedAtLoad: a write killed between creating its
// temporary file and the rename (a kill -9, the OOM killer, the liveness
// probe) left the file in the state directory for good. Loading the state
// removes those older than a minute; a younger one may be another agent's
// write under way (a DaemonSet pod and its replacement, side by side).
func TestStaleTempFilesRemovedAtLoad(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := filepath.Join(dir, StateFileName+".tmp-123")
	fresh := filepath.Join(dir, StateFileName+".tmp-456")
	other := filepath.Join(dir, "notes.tmp-1")
	for _, p := range []string{old, fresh, other} {
		if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
		if p != fresh {
			if err := os.Chtimes(p, now.Add(-time.Hour), now.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, warn := NewTracker(dir, now); warn != nil {
		t.Fatal(warn)
	}
	for p, want := range map[string]bool{old: false, fresh: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s present %v after the load, want %v", filepath.Base(p), err == nil, want)
		}
	}
	// Read-only (nodegc plan) writes nothing, removes nothing.
	if err := os.WriteFile(old, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(old, now.Add(-time.Hour), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, warn := newTracker(dir, now, true, ""); warn != nil {
		t.Fatal(warn)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("a read-only load removed %s: %v", filepath.Base(old), err)
	}
}
