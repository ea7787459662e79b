package images_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/images"
)

// killingRuntime kills containerd right after the first image removal
// succeeds, and counts the calls the check before a removal makes after
// that (image status, container listing).
type killingRuntime struct {
	*afterFirstRemoval
	callsAfter int // under afterFirstRemoval's lock
}

func newKillingRuntime(rt *recordingRuntime, kill func() error) *killingRuntime {
	return &killingRuntime{afterFirstRemoval: &afterFirstRemoval{recordingRuntime: rt, then: func(context.Context, string) error { return kill() }}}
}

func (r *killingRuntime) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	r.countCall()
	return r.recordingRuntime.ListContainers(ctx, f)
}

func (r *killingRuntime) ImageStatus(ctx context.Context, id string) (*runtimeapi.Image, error) {
	r.countCall()
	return r.recordingRuntime.ImageStatus(ctx, id)
}

func (r *killingRuntime) countCall() {
	r.mu.Lock()
	if r.done {
		r.callsAfter++
	}
	r.mu.Unlock()
}

// TestRuntimeDownMidRun, on a real containerd of each version: containerd
// dies (SIGKILL) right after the first removal of a run that means to
// remove four images. The check before the next removal cannot ask the
// runtime (for the image, then its containers), so the run stops there with
// the runtime's error: one call, no other removal tried, and not "not enough removable images"
// (which would raise a FreeDiskSpaceFailed event blaming the images).
// Once containerd is back, a run removes nothing until what the manager
// was built for is confirmed on the new connection (containerd may have
// come back with another sandbox image in its config: the agent reads it
// again, then confirms or builds the GC again); the next run removes the
// rest.
func TestRuntimeDownMidRun(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			for i := range 4 {
				b.pushPull(repoName(i), 2)
			}
			rt := newKillingRuntime(b.runtime, b.node.Kill9)
			m := b.managerWith(rt, t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
			began := time.Now()
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			took := time.Since(began)
			if err := rt.thenErr(); err != nil {
				t.Fatal(err)
			}
			if r == nil || r.Outcome == nil {
				t.Fatalf("no run made: %v", err)
			}
			t.Logf("run: removed %d, skipped %d, failed %d, replans %d in %v; error: %v",
				len(r.Outcome.Removed), len(r.Outcome.Skipped), len(r.Outcome.Failed), r.Outcome.Replans, took.Round(time.Millisecond), err)
			var fe *images.FreeDiskSpaceError
			switch {
			case err == nil:
				t.Fatal("the run succeeded with containerd down")
			case errors.As(err, &fe):
				t.Errorf("the run blames the images (%v), not the runtime", err)
			case !strings.Contains(err.Error(), codes.Unavailable.String()):
				t.Errorf("the run's error does not say the runtime is unavailable: %v", err)
			}
			if len(r.Outcome.Removed) != 1 || len(r.Outcome.Skipped) != 0 || len(r.Outcome.Failed) != 0 || rt.callsAfter != 1 {
				t.Errorf("removed %d, skipped %d, failed %d, %d calls after the kill; want 1 removed, none skipped or failed, 1 call",
					len(r.Outcome.Removed), len(r.Outcome.Skipped), len(r.Outcome.Failed), rt.callsAfter)
			}

			if err := b.node.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			testbed.WaitFor(t, 30*time.Second, "nodegc's CRI client to reconnect", func() bool {
				_, err := b.cri.ListContainers(ctx, nil)
				return err == nil
			})
			if g := b.cri.Generation(); g == 0 {
				t.Errorf("the client's connection generation is %d after containerd's restart, want more than 0", g)
			}
			r, err = m.GarbageCollect(ctx, images.TriggerManual)
			if !errors.Is(err, images.ErrRemovalsHeld) || len(r.Outcome.Removed) > 0 {
				t.Errorf("a run on the new connection before the profile was confirmed: removed %d, error %v; want none, and %v",
					len(r.Outcome.Removed), err, images.ErrRemovalsHeld)
			}
			m.ConfirmProfile(b.cri.Generation())
			r, err = m.GarbageCollect(ctx, images.TriggerManual)
			var fe2 *images.FreeDiskSpaceError
			if err != nil && !errors.As(err, &fe2) {
				t.Fatalf("the run after containerd came back: %v", err)
			}
			if len(r.Outcome.Removed) != 3 {
				t.Errorf("the run after containerd came back removed %d images, want the 3 left", len(r.Outcome.Removed))
			}
		})
	}
}
