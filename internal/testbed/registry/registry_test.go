package registry

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestPushSharedBaseLayer(t *testing.T) {
	ctx := t.Context()
	r := Start(t)
	base := LayerSpec{Seed: "base", Size: 3 << 20}
	a, err := r.Push(ctx, ImageSpec{Repo: "gc/a", Tag: "v1", Layers: []LayerSpec{base, {Seed: "a", Size: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Push(ctx, ImageSpec{Repo: "gc/b", Layers: []LayerSpec{base, {Seed: "b", Size: 2 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.Ref, r.Host+"/gc/b:latest"; got != want {
		t.Errorf("b.Ref = %q, want %q", got, want)
	}
	if len(a.Layers) != 3 || len(b.Layers) != 3 {
		t.Fatalf("layers: a has %d, b has %d, want 3 each (testbin + 2 padding)", len(a.Layers), len(b.Layers))
	}
	if diff := cmp.Diff(a.Layers[:2], b.Layers[:2]); diff != "" {
		t.Errorf("testbin and base layers differ between images (-a +b):\n%s", diff)
	}
	if a.Layers[2].Digest == b.Layers[2].Digest {
		t.Errorf("top layers of a and b share digest %s, want distinct", a.Layers[2].Digest)
	}
	if a.ConfigDigest == b.ConfigDigest {
		t.Errorf("a and b share image ID %s", a.ConfigDigest)
	}
	for _, l := range a.Layers[1:] {
		// Random padding does not compress: the blob is at least the content.
		if l.CompressedSize < l.ContentSize || l.UncompressedSize < l.ContentSize {
			t.Errorf("layer %s: compressed %d, uncompressed %d, content %d: padding compressed below its size",
				l.Digest, l.CompressedSize, l.UncompressedSize, l.ContentSize)
		}
	}
	if a.Layers[1].ContentSize != base.Size {
		t.Errorf("base layer content = %d, want %d", a.Layers[1].ContentSize, base.Size)
	}

	// What the registry serves is what Push reported.
	for _, img := range []*Image{a, b} {
		ref, err := name.ParseReference(img.Ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("get %s: %v", img.Ref, err)
		}
		if got := desc.Digest.String(); got != img.ManifestDigest {
			t.Errorf("%s: registry manifest digest %s, Push reported %s", img.Ref, got, img.ManifestDigest)
		}
		pulled, err := desc.Image()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pulled.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.String() != img.ID() {
			t.Errorf("%s: config digest %s, Push reported %s", img.Ref, cfg, img.ID())
		}
		layers, err := pulled.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range layers {
			d, _ := l.Digest()
			diffID, _ := l.DiffID()
			size, _ := l.Size()
			got := [3]any{d.String(), diffID.String(), size}
			want := [3]any{img.Layers[i].Digest, img.Layers[i].DiffID, img.Layers[i].CompressedSize}
			if got != want {
				t.Errorf("%s layer %d: registry has %v, Push reported %v", img.Ref, i, got, want)
			}
		}
	}
}

func TestPushIsReproducible(t *testing.T) {
	ctx := t.Context()
	spec := ImageSpec{Repo: "gc/same", Layers: []LayerSpec{{Seed: "x", Size: 100 << 10}}}
	// Two registries: nothing is cached between them but the testbin binary.
	first, err := Start(t).Push(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Start(t).Push(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	first.Ref, second.Ref = "", ""
	if diff := cmp.Diff(first, second); diff != "" {
		t.Errorf("same spec pushed twice differs (-first +second):\n%s", diff)
	}
}

func TestPushPause(t *testing.T) {
	r := Start(t)
	p, err := r.PushPause(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Ref, r.Host+"/pause:1"; got != want {
		t.Errorf("pause ref = %q, want %q", got, want)
	}
	if len(p.Layers) != 1 {
		t.Errorf("pause has %d layers, want 1 (testbin)", len(p.Layers))
	}
}

// TestUploadOverHTTP: an image pushed by a client other than Push (as the
// e2e tests push nodegc's image) is uploaded blob by blob over HTTP, and
// the registry serves it back.
func TestUploadOverHTTP(t *testing.T) {
	ctx := t.Context()
	r := Start(t)
	img, err := random.Image(64<<10, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(r.Ref("other/client", "v1"), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Fatalf("manifest digest %v (%v), pushed %v", got, err, want)
	}
	layers, err := pulled.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		rc, err := l.Compressed() // verifies the digest as it is read
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("layer %d: %v", i, err)
		}
		rc.Close()
	}
}
