package images_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// runManager runs a manager of this bed (image GC off, usage tracking on,
// from the container event stream: imageGC.containerEvents) until the test
// ends, and waits until it listed the runtime once.
func (b *bed) runManager(stateDir string) *images.Manager {
	b.t.Helper()
	m := b.manager(stateDir, clock.RealClock{}, func(c *config.ImageGCConfiguration) {
		noThresholdGC(c)
		c.ContainerEvents = true
	})
	images.RunUntilCleanup(b.t, m)
	testbed.WaitFor(b.t, 30*time.Second, "the manager to list the runtime", func() bool {
		_, ok := m.Tracker().Usage()[b.node.Pause.ID()]
		return ok
	})
	return m
}

// useAndRemove runs a container of img in a new pod until it exits, then
// removes the pod; it returns when the removal returned.
func (b *bed) useAndRemove(img *registry.Image) time.Time {
	b.t.Helper()
	b.useImage(img)
	b.removePods()
	return time.Now()
}

// inPlan returns the decision the plan made about the image id.
func inPlan(t *testing.T, p *images.Plan, id string) images.Decision {
	t.Helper()
	for _, ds := range [][]images.Decision{p.Remove, p.Keep, p.Spare} {
		for _, d := range ds {
			if d.Image.ID == id {
				return d
			}
		}
	}
	t.Fatalf("image %s not in the plan", id)
	return images.Decision{}
}

// TestUseBetweenListingsIsDated: an image pulled, used by a container and
// that container removed between two of nodegc's image listings (a short
// Job whose pod is deleted at once) counts as used, to the second. The
// container events name an image nodegc does not know yet; it lists the
// images at once rather than at the next GC run. (Without the event
// stream, imageGC.containerEvents off or containerd 1.6, a container that
// lives less than the polling interval is not seen.)
func TestUseBetweenListingsIsDated(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Containerd2, 0)
	m := b.runManager(t.TempDir())
	img := b.pushPull("job/short", 1)
	before := time.Now()
	removed := b.useAndRemove(img)
	// The use is recorded from the events, and the images they name
	// listed at once: long before the next GC run's listing (the sweep is
	// every 5 minutes), which would otherwise be the first to date it.
	testbed.WaitFor(t, 30*time.Second, "the use recorded from the container events", func() bool {
		return !m.Tracker().Usage()[img.ID()].LastUsed.IsZero()
	})
	seen := time.Now()
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := inPlan(t, plan, img.ID())
	t.Logf("container used from %s, removed by %s, its use recorded by %s; plan: first detected %s, last used %s",
		before.Format(time.StampMilli), removed.Format(time.StampMilli), seen.Format(time.StampMilli),
		d.Image.FirstDetected.Format(time.StampMilli), d.Image.LastUsed.Format(time.StampMilli))
	// Bracketed: after the use began, and no later than nodegc had
	// recorded it (the event's own time, or when nodegc first saw the
	// image, which it lists at once on the event). A use dated by the
	// plan's listing would be after seen.
	if lu := d.Image.LastUsed; lu.IsZero() || lu.Before(before) || lu.After(seen) {
		t.Errorf("last used %v, want between the use's start %v and when nodegc had recorded it %v", lu, before, seen)
	}
}

// TestReplayedEventsAtConnect: containerd keeps the container events made
// while nobody subscribed and delivers them, with their own times, to the
// next subscriber. An image nodegc recorded as used after those events
// keeps its later last-used time; an image pulled and used while nodegc was
// away counts as used, never before nodegc first saw it.
func TestReplayedEventsAtConnect(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Containerd2, 0)
	known := b.pushPull("replay/known", 1)
	unknown := b.pushPull("replay/unknown", 1)
	b.useAndRemove(known)
	b.useAndRemove(unknown)
	// The state of an earlier nodegc that saw the known image used after
	// the events containerd kept.
	dir := t.TempDir()
	recorded := images.Usage{FirstDetected: time.Now().Add(-time.Hour).UTC().Round(0), LastUsed: time.Now().UTC().Round(0)}
	writeState(t, dir, map[string]images.Usage{known.ID(): recorded})

	m := b.runManager(dir)
	testbed.WaitFor(t, 10*time.Second, "the use of the image pulled while nodegc was away", func() bool {
		return !m.Tracker().Usage()[unknown.ID()].LastUsed.IsZero()
	})
	usage := m.Tracker().Usage()
	// (A replayed event may make a deleted container look alive until its
	// deleted event comes, and so its image in use then: later, never
	// earlier.)
	if got := usage[known.ID()]; got.LastUsed.Before(recorded.LastUsed) {
		t.Errorf("known image: last used %v after replayed events, want %v or later (never backwards)", got.LastUsed, recorded.LastUsed)
	}
	if got := usage[unknown.ID()]; got.LastUsed.Before(got.FirstDetected) {
		t.Errorf("image pulled while away: last used %v before first detected %v", got.LastUsed, got.FirstDetected)
	}
}

func writeState(t *testing.T, dir string, usage map[string]images.Usage) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"version": 1, "images": usage})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, images.StateFileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNeverUsedImagesInPullOrder: images pulled between two of nodegc's
// listings share a first-detected time; among never-used images the plan
// removes them in the order they were pulled (containerd's image record
// times), whatever their IDs.
func TestNeverUsedImagesInPullOrder(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 0)
			ctx := t.Context()
			var imgs []*registry.Image
			for i := range 4 {
				img, err := b.node.Registry.Push(ctx, registry.ImageSpec{Repo: repoName(i), Tag: "v1",
					Layers: []registry.LayerSpec{{Seed: repoName(i), Size: mib}}})
				if err != nil {
					t.Fatal(err)
				}
				imgs = append(imgs, img)
			}
			// Pulled in descending ID order: a tie broken by ID is the
			// reverse of the pull order.
			slices.SortFunc(imgs, func(a, b *registry.Image) int { return strings.Compare(b.ID(), a.ID()) })
			var pulled []string
			for i, img := range imgs {
				if i > 0 {
					time.Sleep(time.Second)
				}
				if _, err := b.node.PullImage(ctx, img.Ref); err != nil {
					t.Fatal(err)
				}
				pulled = append(pulled, img.ID())
			}
			high, low := thresholdsAround(b.diskStats(), 100)
			m := b.manager(t.TempDir(), clock.RealClock{}, setThresholds(high, low))
			plan, err := m.Plan(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, d := range plan.Remove {
				if slices.Contains(pulled, d.Image.ID) {
					order = append(order, d.Image.ID)
				}
			}
			if !slices.Equal(order, pulled) {
				t.Errorf("removal order of never-used images pulled a second apart:\n got %v\nwant %v (pull order)", short(order), short(pulled))
			}
		})
	}
}

func short(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id[:min(len(id), 19)]
	}
	return out
}

// TestUsageSavedWithinSeconds: the usage records are written to the state
// directory within seconds of a use, while the manager runs (not only at
// the end of a GC run or at shutdown), so a crash loses only those seconds.
// An image's first use is saved within saveInterval (2 s); a later use
// that moves its last-used time by less than lastUsedSaveStep (1 minute)
// waits for a save that has other cause, or the shutdown's. The pod here
// lives longer than saveInterval, as a loaded machine made one of 2 s do
// (the test then waited for the removal's use in the file, which never
// came): the file holds a use of its life, the tracker the removal's.
func TestUsageSavedWithinSeconds(t *testing.T) {
	t.Parallel()
	b := newBed(t, testbed.Containerd2, 0)
	dir := t.TempDir()
	m := b.runManager(dir)
	img := b.pushPull("save/used", 1)
	before := time.Now()
	b.useImage(img)
	const podLife = 3 * time.Second // beyond SaveInterval: the first use is saved before the removal
	if images.SaveInterval >= podLife {
		t.Fatalf("the pod lives %v, not beyond SaveInterval (%v)", podLife, images.SaveInterval)
	}
	time.Sleep(podLife)
	b.removePods()
	removed := time.Now()
	var saved images.Usage
	// Within saveInterval of the first event, less what the event's
	// delivery and a loaded machine add: the manager runs on meanwhile,
	// so any save seen is one made while it runs.
	testbed.WaitFor(t, 15*time.Second, "a use in the state file", func() bool {
		data, err := os.ReadFile(filepath.Join(dir, images.StateFileName))
		if err != nil {
			return false
		}
		var st struct {
			Images map[string]images.Usage `json:"images"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("state file: %v", err)
		}
		saved = st.Images[img.ID()]
		return !saved.LastUsed.IsZero()
	})
	t.Logf("pod run at %s, removed at %s; state file says last used %s", before.Format(time.StampMilli),
		removed.Format(time.StampMilli), saved.LastUsed.Format(time.StampMilli))
	if saved.LastUsed.Before(before.Add(-time.Second)) || saved.LastUsed.After(removed.Add(time.Second)) {
		t.Errorf("state file: last used %s, outside the pod's life (%s to %s)", saved.LastUsed.Format(time.StampMilli),
			before.Format(time.StampMilli), removed.Format(time.StampMilli))
	}
	// The tracker dates the removal; the file may lag it by less than
	// LastUsedSaveStep.
	testbed.WaitFor(t, 15*time.Second, "the removal's use in the tracker", func() bool {
		return !m.Tracker().Usage()[img.ID()].LastUsed.Before(removed.Add(-time.Second))
	})
	if lag := m.Tracker().Usage()[img.ID()].LastUsed.Sub(saved.LastUsed); lag >= images.LastUsedSaveStep {
		t.Errorf("the state file's last-used time lags the tracker's by %v, want less than %v", lag, images.LastUsedSaveStep)
	}
}
