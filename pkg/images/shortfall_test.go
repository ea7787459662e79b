package images

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/pkg/config"
)

// refusingRemovals is a removalsRuntime whose every RemoveImage fails.
type refusingRemovals struct{ *removalsRuntime }

var errReadOnly = errors.New("rpc error: code = Unknown desc = failed to delete image: read-only file system")

func (refusingRemovals) RemoveImage(context.Context, string) error { return errReadOnly }

// runsCounted returns nodegc_image_gc_runs_total by result.
func runsCounted(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	return byLabel(t, reg, "nodegc_image_gc_runs_total", "result")
}

// TestFailedRemovalsAreAnError: a run that falls short because the runtime
// refused its removals (a read-only root, a runtime bug) is an error run,
// whose error carries the runtime's, as the kubelet reports "errors in image
// deletion": not "not enough removable images" (result not_enough, the
// FreeDiskSpaceFailed Warning, NodegcImageGCCannotFreeEnough), which blames
// images in use, pinned or young and drops the runtime's error.
func TestFailedRemovalsAreAnError(t *testing.T) {
	rt := &removalsRuntime{images: []*runtimeapi.Image{
		{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib},
		{Id: "sha256:bb", RepoTags: []string{"registry.example/b:1"}, Size: 30 * mib},
	}}
	reg := prometheus.NewRegistry()
	m := everythingNeeded(t, Options{Runtime: refusingRemovals{rt}, Registerer: reg})
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	var fe *FreeDiskSpaceError
	switch {
	case errors.As(err, &fe):
		t.Errorf("error %v: a FreeDiskSpaceError (not enough removable images) for removals the runtime refused", err)
	case !errors.Is(err, errReadOnly) || !strings.Contains(err.Error(), "2 removals failed"):
		t.Errorf("error %v: want the runtime's error and that 2 removals failed", err)
	}
	if got := runsCounted(t, reg); got[resultError] != 1 || got[resultNotEnough] != 0 {
		t.Errorf("runs by result %v, want one error", got)
	}
	if r == nil || r.Outcome == nil || len(r.Outcome.Failed) != 2 || r.Outcome.Short == 0 {
		t.Errorf("outcome %+v: want 2 failed, short of what was asked", r)
	}
}

// TestDryRunShortIsNoFailure: a dry run that would fall short is a dry_run
// run with no error (no FreeDiskSpaceFailed Warning claiming bytes freed
// while nothing was removed); its outcome says by how much it would.
func TestDryRunShortIsNoFailure(t *testing.T) {
	rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib}}}
	reg := prometheus.NewRegistry()
	m := everythingNeeded(t, Options{Runtime: rt, Registerer: reg}, func(c *config.ImageGCConfiguration) { c.DryRun = true })
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Errorf("dry run: %v, want no error", err)
	}
	if got := runsCounted(t, reg); got[resultDryRun] != 1 || got[resultNotEnough]+got[resultError]+got[resultSuccess] != 0 {
		t.Errorf("runs by result %v, want one dry_run", got)
	}
	if len(rt.removed) != 0 || r == nil || r.Outcome == nil || len(r.Outcome.Removed) != 1 || r.Outcome.Short == 0 {
		t.Errorf("removed %v, outcome %+v: want nothing removed, aa listed, short of what was asked", rt.removed, r)
	}
}

// TestShortfallCountsWhatWentMeanwhile: the shortfall's message counts the
// images another removed since the plan, as its test does: "freed 10 MiB"
// alone, when 30 MiB more went, does not add up with the usage graph.
func TestShortfallCountsWhatWentMeanwhile(t *testing.T) {
	images := []Image{img("a", 30, time.Hour, 3*time.Hour), img("b", 10, time.Hour, 2*time.Hour)}
	plan := planFor(t, images, DiskStats{Capacity: 1000 * mib, Available: 0}, nil) // 200 MiB to free
	goneA := func(i *Image) (string, error) {
		if i.ID == "a" {
			return checkGone, nil
		}
		return "", nil
	}
	out, err := executePlanned(t.Context(), &fakeRemover{}, plan, goneA, false)
	var fe *FreeDiskSpaceError
	if !errors.As(err, &fe) || fe.Freed != 10*mib || fe.Gone != 30*mib || !strings.Contains(fe.Error(), "31457280 bytes of images removed by another") {
		t.Errorf("error %v, want a FreeDiskSpaceError saying 10 MiB freed and 30 MiB gone meanwhile", err)
	}
	if out.Short != 160*mib {
		t.Errorf("short by %d, want 160 MiB", out.Short)
	}
}
