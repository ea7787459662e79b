package images_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/images"
)

// podsNaming is a pod source whose authoritative view names refs.
type podsNaming map[string]string

func (p podsNaming) PodImages() images.PodImages {
	return images.PodImages{Authoritative: true, Refs: p}
}

// askingRuntime records the references ImageStatus is asked for.
type askingRuntime struct {
	*recordingRuntime
	mu    sync.Mutex
	asked []string
}

func (r *askingRuntime) ImageStatus(ctx context.Context, ref string) (*runtimeapi.Image, error) {
	r.mu.Lock()
	r.asked = append(r.asked, ref)
	r.mu.Unlock()
	return r.recordingRuntime.ImageStatus(ctx, ref)
}

// TestShortNameResolvedByTheRuntime, on each real containerd: pods bound to
// the node name images by short names, one the runtime has (under
// docker.io, as containerd resolves every short name) and one it has not.
// The scheduled rule asks the runtime to resolve them, as CRI-O's
// registries.conf aliases need: containerd answers the image for the one
// and nothing, not an error, for the other, so the run goes on, removes the
// image no pod names and keeps the named one as scheduled.
func TestShortNameResolvedByTheRuntime(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			unnamed := b.pushPull(repoName(0), 2).ID()
			named := b.pushPull(repoName(1), 2).ID()
			ctr := b.containerd()
			if err := addName(ctx, ctr, b.cri, named, "docker.io/library/nodegc-short:v1"); err != nil {
				t.Fatal(err)
			}
			got, err := b.cri.ImageStatus(ctx, "nodegc-short:v1")
			if err != nil || got.GetId() != named {
				t.Fatalf("containerd resolves the short name nodegc-short:v1 to %v (err %v), want %s", got.GetId(), err, named)
			}
			b.pods = podsNaming{"nodegc-short:v1": "web/pending", "nodegc-absent:v1": "web/other"}
			rt := &askingRuntime{recordingRuntime: b.runtime}
			m := b.managerWith(rt, t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run: %v", err)
			}
			t.Logf("run error (the threshold asks for everything): %v", err)
			removed, _ := outcome(r)
			if !slices.Equal(removed, []string{unnamed}) {
				t.Errorf("removed %v, want only the image no pod names %s", removed, unnamed)
			}
			var keptBy string
			for _, d := range r.Plan.Keep {
				if d.Image.ID == named {
					keptBy = d.Reason
				}
			}
			if keptBy != images.KeepScheduled {
				t.Errorf("the image the short name resolves to kept as %q, want %q", keptBy, images.KeepScheduled)
			}
			rt.mu.Lock()
			defer rt.mu.Unlock()
			for _, ref := range []string{"nodegc-short:v1", "nodegc-absent:v1"} {
				if !slices.Contains(rt.asked, ref) {
					t.Errorf("the runtime was not asked to resolve %s (asked %v)", ref, rt.asked)
				}
			}
		})
	}
}
