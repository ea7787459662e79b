package images_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestSandboxImagePinnedByDigest: containerd's config names the sandbox
// image with its tag and digest (REF:TAG@sha256:...), as operators pin it,
// and CRI lists the image only as REF:TAG and REF@sha256:..., never as
// configured; containerd 2.x then does not pin it (it pins an image only
// under exactly the name configured) and does not report it. A GC asked
// to free everything removable keeps it:
//   - while a pod's sandbox runs it, on either containerd, as the image of
//     a sandbox containerd holds;
//   - once no sandbox is left, also after the agent restarted: on
//     containerd 1.6 because nodegc recognises the name its status reports
//     in the names CRI lists, and on either as the image the sandboxes
//     last ran (the state file remembers it).
func TestSandboxImagePinnedByDigest(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBedWith(t, node.Options{Version: v, SmallFS: 256 * mib, SandboxImageByDigest: true})
			ctx := t.Context()
			sandbox, err := b.cri.SandboxImage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if v == testbed.Containerd16 && sandbox != b.node.SandboxImage {
				t.Fatalf("the runtime names its sandbox image %q, want %q as configured", sandbox, b.node.SandboxImage)
			}
			t.Logf("the runtime's status names its sandbox image %q; configured %q", sandbox, b.node.SandboxImage)

			// collect frees everything removable, with a manager started
			// anew on the same state (as after an agent restart), and says
			// why the plan kept the pause image.
			stateDir := t.TempDir()
			collect := func() (kept bool, reason string) {
				t.Helper()
				m := b.manager(stateDir, clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
				r, err := m.GarbageCollect(ctx, images.TriggerManual)
				var fe *images.FreeDiskSpaceError
				if err != nil && !errors.As(err, &fe) {
					t.Fatal(err)
				}
				if i := slices.IndexFunc(r.Plan.Keep, func(d images.Decision) bool { return d.Image.ID == b.node.Pause.ID() }); i >= 0 {
					reason = r.Plan.Keep[i].Reason
				}
				return b.imageIDs()[b.node.Pause.ID()], reason
			}
			// wantReason: containerd 2.x pins it in a node of the exact
			// name, and the first rule that holds names the reason.
			wantReason := func(got string) bool {
				return got == images.KeepSandbox || (v != testbed.Containerd16 && got == images.KeepPinned)
			}

			if _, err := b.node.RunPod(ctx, node.PodSpec{Name: "alive", Namespace: "default"}); err != nil {
				t.Fatal(err)
			}
			other := b.pushPull("src/other", 2)
			if kept, reason := collect(); !kept || !wantReason(reason) {
				t.Errorf("with a pod's sandbox running: sandbox image kept %v (reason %q), want kept as %q", kept, reason, images.KeepSandbox)
			}
			if b.imageIDs()[other.ID()] {
				t.Errorf("image %s, unused and not excluded, was kept", other.Ref)
			}

			// No sandbox left, and on containerd 2.x nothing else names
			// the image (neither its status nor a pin): the image the
			// sandboxes last ran, which the state remembers, is kept.
			b.removePods()
			if kept, reason := collect(); !kept || reason != images.KeepSandbox {
				t.Errorf("with no sandbox left, after a restart: sandbox image kept %v (reason %q), want kept as %q", kept, reason, images.KeepSandbox)
			}
		})
	}
}
