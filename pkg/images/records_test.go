package images

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// fakeRecords is a source of the runtime's records of containers whose
// answers the test sets; tops maps an image ID to its top layer.
type fakeRecords struct {
	mu     sync.Mutex
	recs   ContainerRecords
	err    error
	tops   map[string]string
	topErr error
}

func (f *fakeRecords) ContainerRecords(context.Context) (ContainerRecords, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recs, f.err
}

func (f *fakeRecords) TopLayer(_ context.Context, img *Image) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tops[img.ID], f.topErr
}

func (f *fakeRecords) set(recs ContainerRecords, err, topErr error) {
	f.mu.Lock()
	f.recs, f.err, f.topErr = recs, err, topErr
	f.mu.Unlock()
}

// TestContainerRecordsInUse: the runtime's records of containers (of
// containers CRI does not list) keep an image one names, in any form, and
// one whose top layer a record's root filesystem was made on; not the
// image whose top layer is only under another's (its base). When they
// cannot be listed, or containerd cannot be asked for an image's top layer,
// the plan fails, and so does the check before a removal: nothing is
// removed on doubt (an image containerd answers it cannot read is kept:
// TestUnreadableImageKeptAndTheRunGoesOn).
func TestContainerRecordsInUse(t *testing.T) {
	images := func() []*runtimeapi.Image {
		return []*runtimeapi.Image{
			{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib},
			{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1"}, Size: 30 * mib},
			{Id: "sha256:cc", RepoTags: []string{"registry.example/c:1"}, Size: 30 * mib},
			{Id: "sha256:dd", RepoTags: []string{"registry.example/d:1"}, Size: 30 * mib},
		}
	}
	tops := map[string]string{"sha256:aa": "chain-a", "sha256:bb": "chain-b", "sha256:cc": "chain-c", "sha256:dd": "chain-c-d"}
	t.Run("kept", func(t *testing.T) {
		rt := &removalsRuntime{images: images()}
		recs := &fakeRecords{tops: tops, recs: ContainerRecords{
			Images: []string{"registry.example/a:1", "registry.example/moved:2"},
			Layers: map[string]bool{"chain-c-d": true},
		}}
		m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, ContainerRecords: recs})
		r, err := m.GarbageCollect(t.Context(), TriggerManual)
		if r == nil || r.Plan == nil {
			t.Fatalf("no plan: %v", err)
		}
		kept := map[string]string{}
		for _, d := range r.Plan.Keep {
			kept[d.Image.ID] = d.Reason
		}
		if diff := cmp.Diff(map[string]string{"sha256:aa": KeepInUse, "sha256:dd": KeepInUse}, kept); diff != "" {
			t.Errorf("kept by the plan (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"sha256:bb", "sha256:cc"}, rt.removed); diff != "" {
			t.Errorf("removed (-want +got):\n%s", diff)
		}
	})
	injected := errors.New("containerd: connection refused")
	for name, tc := range map[string]struct{ list, top error }{
		"listing fails": {list: injected},
		"top layer":     {top: injected},
	} {
		t.Run(name+" at the plan", func(t *testing.T) {
			rt := &removalsRuntime{images: images()}
			recs := &fakeRecords{tops: tops}
			recs.set(ContainerRecords{Layers: map[string]bool{"chain-x": true}}, tc.list, tc.top)
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, ContainerRecords: recs})
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, injected) {
				t.Errorf("run error %v, want %v", err, injected)
			}
			if len(rt.removed) > 0 {
				t.Errorf("removed %v, want none", rt.removed)
			}
		})
		t.Run(name+" at the check", func(t *testing.T) {
			rt := &removalsRuntime{images: images()}
			recs := &fakeRecords{tops: tops}
			recs.set(ContainerRecords{Layers: map[string]bool{"chain-x": true}}, nil, nil)
			rt.onRemove = func(string) { recs.set(ContainerRecords{Layers: map[string]bool{"chain-x": true}}, tc.list, tc.top) }
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, ContainerRecords: recs})
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, injected) {
				t.Errorf("run error %v, want %v", err, injected)
			}
			if diff := cmp.Diff([]string{"sha256:aa"}, rt.removed); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecordedUseDatesTheImage: an image a record of the runtime's (a
// container CRI does not list: ctr, nerdctl, buildkit) keeps is in use
// while the record stays, as an image volume's is, and its last use is
// dated at each plan that sees the record: once the record goes,
// maximumGCAge (2h here) counts from then, not from when nodegc first saw
// the image. Before, a record never dated its image, and the first run
// after the record went removed an image in use a minute before.
func TestRecordedUseDatesTheImage(t *testing.T) {
	rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/job:1"}, Size: mib}}}
	recs := &fakeRecords{recs: ContainerRecords{Images: []string{"registry.example/job:1"}}}
	cfg := policyConfig()
	cfg.MaximumGCAge = &metav1.Duration{Duration: 2 * time.Hour}
	cfg.HighThresholdPercent = ptr.To[int32](100) // the age rule alone
	clk := clocktesting.NewFakeClock(t0)
	m, err := NewManager(Options{Config: cfg, StateDirectory: t.TempDir(), NodeName: "node-a", Runtime: rt, ContainerRecords: recs,
		Disk: statsDisk{Capacity: 100 * mib, Available: 90 * mib}, Clock: clk, SettleTimeout: noSettle})
	if err != nil {
		t.Fatal(err)
	}
	run := func(at time.Duration, wantRemoved int, what string) {
		t.Helper()
		clk.SetTime(t0.Add(at))
		if _, err := m.GarbageCollect(t.Context(), TriggerPeriodic); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(rt.removed) != wantRemoved {
			t.Fatalf("%s: removed %v, want %d removed", what, rt.removed, wantRemoved)
		}
	}
	run(0, 0, "first seen, in a record")
	run(3*time.Hour, 0, "3h later, the record still there")
	recs.set(ContainerRecords{}, nil, nil)
	run(3*time.Hour+time.Minute, 0, "a minute after the record went")
	run(5*time.Hour-time.Second, 0, "2h - 1s after the record was last seen")
	run(5*time.Hour+time.Second, 1, "2h + 1s after the record was last seen")
}

// slowRecords is a records source whose reads run hook after their
// listing, as containerd's reads the snapshots of records new to it.
type slowRecords struct {
	*fakeRecords
	hook func()
}

func (s *slowRecords) ContainerRecords(ctx context.Context) (ContainerRecords, error) {
	recs, err := s.fakeRecords.ContainerRecords(ctx)
	s.hook()
	return recs, err
}

// TestSlowRecordsReadAgain: the check's last reads of containers (the CRI
// listing, then containerd's records) are made again while they took
// longer than lateReadBound: a record whose snapshot is on a proxy
// snapshotter that hangs takes seconds to read, and a CRI container or a
// record made from the image meanwhile keeps it. When they stay slow
// lateReadTries times in a row, the check fails and nothing more is
// removed. Before, a container made while the records were read slowly
// was not seen, and its image was removed.
func TestSlowRecordsReadAgain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		slowReads int    // reads of bb's check that take 3 s
		made      string // what is made from bb during the first slow read
		wantKept  string // bb kept so at its check; "" for a failed check
	}{
		{name: "CRI container", slowReads: 1, made: "container", wantKept: KeepInUse},
		{name: "record", slowReads: 1, made: "record", wantKept: KeepInUse},
		{name: "slow every time", slowReads: lateReadTries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &listingRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: threeImages()}}}
			recs := &slowRecords{fakeRecords: &fakeRecords{}}
			checkClock := clocktesting.NewFakePassiveClock(t0)
			var slow atomic.Int32
			rt.onRemove = func(id string) {
				if id == "sha256:aa" {
					slow.Store(int32(tc.slowReads)) // bb's check reads next
				}
			}
			recs.hook = func() {
				left := slow.Load()
				if left <= 0 {
					return
				}
				if left == int32(tc.slowReads) {
					switch tc.made {
					case "container":
						rt.add(&runtimeapi.Container{Id: "late", ImageRef: "sha256:bb", ImageId: "sha256:bb",
							Image: &runtimeapi.ImageSpec{Image: "registry.example/b:1"}, State: runtimeapi.ContainerState_CONTAINER_CREATED})
					case "record":
						recs.set(ContainerRecords{Images: []string{"registry.example/b:1"}}, nil, nil)
					}
				}
				slow.Add(-1)
				checkClock.SetTime(checkClock.Now().Add(3 * time.Second))
			}
			m := everythingNeeded(t, Options{Runtime: rt, ContainerRecords: recs})
			m.checkClock = checkClock
			if tc.wantKept != "" {
				r, err := m.GarbageCollect(t.Context(), TriggerManual)
				if r == nil || r.Outcome == nil {
					t.Fatalf("no run: %v", err)
				}
				if slices.Contains(rt.removed, "sha256:bb") {
					t.Errorf("removed %v; want sha256:bb kept (%s), made while the records were read slowly", rt.removed, tc.wantKept)
				}
				if !slices.ContainsFunc(r.Outcome.Skipped, func(d Decision) bool { return d.Image.ID == "sha256:bb" && d.Reason == tc.wantKept }) {
					t.Errorf("skipped at the check %v; want sha256:bb %s", r.Outcome.Skipped, tc.wantKept)
				}
				return
			}
			_, err := m.GarbageCollect(t.Context(), TriggerManual)
			if err == nil || !strings.Contains(err.Error(), "times in a row") {
				t.Errorf("run error %v; want the check failed for reads slow %d times in a row", err, lateReadTries)
			}
			if diff := cmp.Diff([]string{"sha256:aa"}, rt.removed); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}
