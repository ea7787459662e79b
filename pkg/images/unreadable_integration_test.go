package images_test

import (
	"errors"
	"testing"
	"time"

	godigest "github.com/opencontainers/go-digest"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestUnreadableImageIsKeptAndTheOthersGo, on a real containerd 2.x: an
// image whose storage containerd cannot read (its config blob gone from
// the content store, by corruption or a `ctr content rm`, while the CRI
// plugin still lists it) cannot be told unused by the runtime's records of
// containers, which exist on any node running a pod (here one exited
// container): it is kept, as unreadable, and never removed on that missing
// information. It stops nothing else: every run goes on, and removes the
// other images not in use, their layers read as ever (before, one
// unreadable image put every plan on CRI sizes for as long as it stayed:
// review images r9 #2).
func TestUnreadableImageIsKeptAndTheOthersGo(t *testing.T) {
	b := newBed(t, testbed.Containerd2, 256*mib)
	b.registry = prometheus.NewRegistry()
	ctx := t.Context()
	used := b.pushPull("unreadable/used", 1)
	broken := b.pushPull("unreadable/broken", 1)
	free := b.pushPull("unreadable/free", 1)
	b.useImage(used)
	c := b.containerd()
	if err := c.ContentStore().Delete(ctx, godigest.Digest(broken.ID())); err != nil {
		t.Fatal(err)
	}
	if !b.imageIDs()[broken.ID()] {
		t.Fatal("the CRI plugin no longer lists the broken image")
	}
	m := b.manager(t.TempDir(), clocktesting.NewFakeClock(time.Now()), setThresholds(1, 0))
	for i := range 2 {
		r, err := m.GarbageCollect(ctx, images.TriggerManual)
		var fe *images.FreeDiskSpaceError
		if err != nil && !errors.As(err, &fe) {
			t.Errorf("run %d: %v", i, err)
		}
		if r == nil || r.Plan == nil {
			continue
		}
		kept := map[string]string{}
		for _, d := range r.Plan.Keep {
			kept[d.Image.ID] = d.Reason
		}
		if kept[broken.ID()] != images.KeepUnreadable {
			t.Errorf("run %d: the unreadable image kept %q, want unreadable", i, kept[broken.ID()])
		}
		if kept[used.ID()] != images.KeepInUse {
			t.Errorf("run %d: the used image kept %q, want %s", i, kept[used.ID()], images.KeepInUse)
		}
		if !r.Plan.ExactAccounting {
			t.Errorf("run %d: planned with CRI sizes; want the other images' layers read (one unreadable image counts alone by its CRI size)", i)
		}
		if got := b.metric("nodegc_image_gc_images_skipped", "reason=unreadable"); got != 1 {
			t.Errorf("run %d: nodegc_image_gc_images_skipped{reason=unreadable} %v, want 1", i, got)
		}
	}
	ids := b.imageIDs()
	if ids[free.ID()] {
		t.Errorf("the free image %s is still there", free.ID())
	}
	if !ids[broken.ID()] || !ids[used.ID()] {
		t.Fatalf("the unreadable image (%v) or the used one (%v) went", ids[broken.ID()], ids[used.ID()])
	}

	// Pulled again, as the log advises: containerd fetches the blob it
	// lacks, the image can be read, and goes as any other not in use.
	if _, err := b.node.PullImage(ctx, broken.Ref); err != nil {
		t.Fatal(err)
	}
	r, err := m.GarbageCollect(ctx, images.TriggerManual)
	var fe *images.FreeDiskSpaceError
	if err != nil && !errors.As(err, &fe) {
		t.Errorf("run after the pull: %v", err)
	}
	if removed, _ := outcome(r); len(removed) != 1 || removed[0] != broken.ID() {
		t.Errorf("removed %v after the pull, want %s", removed, broken.ID())
	}
}
