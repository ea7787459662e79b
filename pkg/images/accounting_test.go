package images

import (
	"fmt"
	"sync"
	"testing"
	"time"
	"unique"
)

// TestLayerMemoFollowsChangedLayers: the layer memo of a Policy never
// changes what a plan says. The same image ID reported with other layers
// (e.g. after a re-pull under a reused ID in a test runtime, or layers that
// were not all known at first) is accounted with the layers it has now, a
// caller reusing its layer slice is not fooled, and a memo full of images
// gone since is dropped and rebuilt.
func TestLayerMemoFollowsChangedLayers(t *testing.T) {
	p := policyFor(t, nil)
	disk := DiskStats{Capacity: 100000 * mib, Available: 0} // every image is needed
	base := Layer{Key: unique.Make("sha256:base"), Size: 100 * mib}
	own := func(id string, size uint64) Layer {
		return Layer{Key: unique.Make("sha256:own-" + id), Size: size * mib}
	}
	img := func(id string, layers ...Layer) Image {
		return Image{ID: id, Size: 500 * mib, FirstDetected: t0.Add(-10 * time.Hour), Layers: layers}
	}
	freed := func(images ...Image) uint64 {
		t.Helper()
		plan, err := p.Plan(images, disk, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !plan.ExactAccounting {
			t.Fatalf("plan not exact")
		}
		return plan.EstimatedFreed / mib
	}

	if got := freed(img("a", base, own("a", 10)), img("b", base, own("b", 20))); got != 130 {
		t.Errorf("a and b sharing the base: freed %d MiB, want 130", got)
	}
	// b no longer shares the base: a's base is freed with a, b's own base too.
	other := Layer{Key: unique.Make("sha256:other-base"), Size: 50 * mib}
	if got := freed(img("a", base, own("a", 10)), img("b", other, own("b", 20))); got != 180 {
		t.Errorf("after b's layers changed: freed %d MiB, want 180", got)
	}
	// The caller reuses its slice with new contents.
	layers := []Layer{base, own("c", 5)}
	if got := freed(img("c", layers...)); got != 105 {
		t.Errorf("c: freed %d MiB, want 105", got)
	}
	layers[1] = own("c", 7)
	if got := freed(Image{ID: "c", Size: 500 * mib, FirstDetected: t0.Add(-10 * time.Hour), Layers: layers}); got != 107 {
		t.Errorf("c with its slice rewritten: freed %d MiB, want 107", got)
	}
	// Many images, then few: the memo is rebuilt and stays right.
	var many []Image
	for i := range 3000 {
		id := fmt.Sprint("m", i)
		many = append(many, img(id, base, own(id, 1)))
	}
	if got := freed(many...); got != 3100 {
		t.Errorf("3000 images: freed %d MiB, want 3100", got)
	}
	if got := freed(img("a", base, own("a", 10))); got != 110 {
		t.Errorf("a alone after many: freed %d MiB, want 110", got)
	}
	if n := len(p.layers.byImage); n > 1 {
		t.Errorf("memo holds %d images after a plan of one (following a plan of 3000), want it rebuilt", n)
	}
}

// TestLayerMemoConcurrentPlans: plans made at the same time with one Policy
// (a GC run and `nodegc plan`) are each right (run with -race).
func TestLayerMemoConcurrentPlans(t *testing.T) {
	p := policyFor(t, nil)
	disk := DiskStats{Capacity: 100000 * mib, Available: 0} // every image is needed
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 50 {
				// Each goroutine plans its own images over a shared base.
				var in []Image
				for i := range 20 {
					id := fmt.Sprintf("g%d-r%d-%d", g, round%3, i)
					in = append(in, Image{ID: id, Size: 500 * mib, FirstDetected: t0.Add(-10 * time.Hour),
						Layers: []Layer{{Key: unique.Make("sha256:base"), Size: 100 * mib}, {Key: unique.Make("sha256:" + id), Size: mib}}})
				}
				plan, err := p.Plan(in, disk, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if plan.EstimatedFreed != 120*mib {
					t.Errorf("goroutine %d round %d: freed %d MiB, want 120", g, round, plan.EstimatedFreed/mib)
					return
				}
			}
		})
	}
	wg.Wait()
}
