package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildTags: the tarball and the OCI layout carry --ref and, with
// --latest (make image's), <repository>:latest too, the tag
// deploy/daemonset.yaml and the chart name, which `kind load image-archive`
// then provides; both name one image (the e2e suite reads the tarball's
// only image). A --ref that is latest already is tagged once.
func TestBuildTags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "nodegc")
	if err := os.WriteFile(bin, []byte("not a binary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		ref    string
		latest bool
		want   []string
	}{
		{"ghcr.io/nodegc/nodegc:v0.1.0-3-gabcdef0-dirty", true, []string{"ghcr.io/nodegc/nodegc:latest", "ghcr.io/nodegc/nodegc:v0.1.0-3-gabcdef0-dirty"}},
		{"registry.example.com/team/nodegc:v1", true, []string{"registry.example.com/team/nodegc:latest", "registry.example.com/team/nodegc:v1"}},
		{"ghcr.io/nodegc/nodegc:latest", true, []string{"ghcr.io/nodegc/nodegc:latest"}},
		{"ghcr.io/nodegc/nodegc:v1", false, []string{"ghcr.io/nodegc/nodegc:v1"}},
	}
	for _, tc := range cases {
		t.Run(tc.ref, func(t *testing.T) {
			out := t.TempDir()
			if err := build(bin, tc.ref, out, "v1", "abc", tc.latest); err != nil {
				t.Fatal(err)
			}
			tarPath := filepath.Join(out, "nodegc.tar")
			m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarPath) })
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 1 {
				t.Fatalf("the tarball holds %d images, want 1", len(m))
			}
			tags := slices.Sorted(slices.Values(m[0].RepoTags))
			if diff := cmp.Diff(tc.want, tags); diff != "" {
				t.Errorf("tarball RepoTags (-want +got):\n%s", diff)
			}
			if _, err := tarball.ImageFromPath(tarPath, nil); err != nil {
				t.Errorf("the tarball's one image, read without a tag: %v", err)
			}

			idx, err := layout.ImageIndexFromPath(filepath.Join(out, "oci"))
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			// One entry, named --ref: crane push of a layout takes one
			// image (two entries: "layout contains 2 entries").
			var names []string
			for _, d := range im.Manifests {
				names = append(names, d.Annotations["org.opencontainers.image.ref.name"])
			}
			if !slices.Equal(names, []string{tc.ref}) {
				t.Errorf("OCI layout ref names %q, want only %q", names, tc.ref)
			}
		})
	}
}
