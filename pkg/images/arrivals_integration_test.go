package images_test

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestArrivalsByName, on a real containerd of each version: an image's
// arrival is the creation time of containerd's record named by its ID;
// without that record (removed by hand, or a runtime that made none), the
// earliest of the records named by its tags and digests. The same whether
// one image is asked for (the check before a removal, which looks records
// up by name) or several (a plan, which lists containerd's image store).
func TestArrivalsByName(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 128*mib)
			ctx := t.Context()
			pulled := b.pushPull("arrivals/byname", 1)
			time.Sleep(10 * time.Millisecond)
			other := b.pushPull("arrivals/other", 1)
			ctr := b.containerd()
			st, err := b.cri.ImageStatus(ctx, pulled.ID())
			if err != nil || st == nil {
				t.Fatalf("image %s: %v, %v", pulled.ID(), st, err)
			}
			img := &runtimeapi.Image{Id: st.GetId(), RepoTags: st.GetRepoTags(), RepoDigests: st.GetRepoDigests()}
			created := func(name string) time.Time {
				t.Helper()
				r, err := ctr.ImageService().Get(ctx, name)
				if err != nil {
					t.Fatalf("containerd's record %s: %v", name, err)
				}
				return r.CreatedAt
			}
			byName := time.Time{}
			for _, n := range append(append([]string(nil), img.RepoTags...), img.RepoDigests...) {
				if at := created(n); byName.IsZero() || at.Before(byName) {
					byName = at
				}
			}
			check := func(what string, want time.Time) {
				t.Helper()
				for _, asked := range [][]*runtimeapi.Image{{img}, {img, {Id: other.ID()}}} {
					got, err := b.layers.Arrivals(ctx, asked)
					if err != nil {
						t.Fatal(err)
					}
					if !got[img.Id].Equal(want) {
						t.Errorf("%s, %d images asked: arrival %v, want %v", what, len(asked), got[img.Id], want)
					}
				}
			}
			check("with the ID's record", created(img.Id))
			if err := ctr.ImageService().Delete(ctx, img.Id); err != nil {
				t.Fatal(err)
			}
			check("without the ID's record", byName)
		})
	}
}
