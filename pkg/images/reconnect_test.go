package images

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// generationRuntime is a runtime whose connection numbers its losses, as
// cri.Client.Generation does.
type generationRuntime struct {
	statusRuntime
	gen atomic.Uint64
}

func (r *generationRuntime) Generation() uint64 { return r.gen.Load() }

// TestNoRemovalAfterReconnectUntilConfirmed: the manager was built for
// what the runtime said of itself (its sandbox image above all) on one
// connection; the connection was lost and came back since (the runtime
// may have restarted with another sandbox image). No image is removed
// until the agent read the runtime again and confirmed what the manager
// was built for; a loss in the middle of a run stops it.
func TestNoRemovalAfterReconnectUntilConfirmed(t *testing.T) {
	images := func() *generationRuntime {
		return &generationRuntime{statusRuntime: statusRuntime{&removalsRuntime{images: threeImages()}}}
	}
	rt := images()
	m := everythingNeeded(t, Options{Runtime: rt, ProfileGeneration: 2})
	held := func() float64 { return testutil.ToFloat64(m.metrics.removalsHeld.WithLabelValues(heldReconnected)) }
	rt.gen.Store(3)
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, ErrRemovalsHeld) || len(rt.removed) > 0 {
		t.Fatalf("a run after a reconnection, before the profile was read again: removed %v, error %v; want none removed, and %v", rt.removed, err, ErrRemovalsHeld)
	}
	if held() != 1 {
		t.Errorf("removals held after a reconnection: gauge %v, want 1", held())
	}
	m.ConfirmProfile(1) // an older read changes nothing
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, ErrRemovalsHeld) || len(rt.removed) > 0 {
		t.Fatalf("confirmed on an older connection: removed %v, error %v; want none removed, and %v", rt.removed, err, ErrRemovalsHeld)
	}
	m.ConfirmProfile(3)
	if held() != 0 {
		t.Errorf("removals confirmed: gauge %v, want 0", held())
	}
	// The connection is lost during the run, after the first removal.
	rt.onRemove = func(string) { rt.gen.Store(4) }
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, ErrRemovalsHeld) {
		t.Errorf("a loss during the run: error %v, want %v", err, ErrRemovalsHeld)
	}
	if diff := cmp.Diff([]string{"sha256:aa"}, rt.removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

// TestNoRemovalWhileTheSandboxImageIsUnread: the runtime reports its
// sandbox image, but could not be asked for it when the manager was built:
// the manager plans, but removes nothing, and says so in its gauge.
func TestNoRemovalWhileTheSandboxImageIsUnread(t *testing.T) {
	rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/pause:3.10"}, Size: 30 * mib}}}
	m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, ProfileUnread: "sandbox image"})
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if !errors.Is(err, ErrRemovalsHeld) || len(rt.removed) > 0 {
		t.Errorf("removed %v, error %v; want none removed, and %v", rt.removed, err, ErrRemovalsHeld)
	}
	if r == nil || r.Plan == nil || len(r.Plan.Remove) != 1 {
		t.Errorf("the manager did not plan the removal it holds: %+v", r)
	}
	if got := testutil.ToFloat64(m.metrics.removalsHeld.WithLabelValues(heldProfileUnread)); got != 1 {
		t.Errorf("removals held for the unread sandbox image: gauge %v, want 1", got)
	}
}
