// Command image builds nodegc's container image without a Docker daemon:
// one layer holding the static nodegc binary, written as an OCI image
// layout and as a tarball that `ctr images import`, `kind load
// image-archive`, `docker load` and `crane push` take. `make image` runs it.
//
// The image is tagged --ref and, in the tarball, with --latest (the
// default), also <repository>:latest, the tag deploy/daemonset.yaml and
// the chart's image.tag name: loaded into a node (kind load, ctr images
// import), the tarball then gives the manifest's image as well as the
// versioned one. The OCI layout holds one entry, named --ref, as crane
// push takes it.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func main() {
	binary := flag.String("binary", "_output/bin/nodegc", "static linux nodegc binary to put in the image")
	ref := flag.String("ref", "ghcr.io/nodegc/nodegc:latest", "image reference the tarball is tagged with")
	out := flag.String("out", "_output/image", "output directory: nodegc.tar and oci/")
	version := flag.String("version", "", "version label")
	revision := flag.String("revision", "", "revision (commit) label")
	latest := flag.Bool("latest", true, "also tag the image <repository of --ref>:latest, the tag deploy/daemonset.yaml and the chart name")
	flag.Parse()
	if err := build(*binary, *ref, *out, *version, *revision, *latest); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func build(binary, ref, out, version, revision string, latest bool) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	tags := []name.Tag{tag}
	if l := tag.Context().Tag(name.DefaultTag); latest && l.String() != tag.String() {
		tags = append(tags, l)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("%w (run make build first)", err)
	}
	layerTar, err := tarOf(map[string][]byte{"nodegc": bin})
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()} // reproducible
	cf.Config.Entrypoint = []string{"/nodegc"}
	cf.Config.Cmd = []string{"run"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    "nodegc",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/nodegc/nodegc",
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	tarPath := filepath.Join(out, "nodegc.tar")
	refs := map[name.Reference]v1.Image{}
	for _, t := range tags {
		refs[t] = img
	}
	if err := tarball.MultiRefWriteToFile(tarPath, refs); err != nil {
		return fmt.Errorf("writing %s: %w", tarPath, err)
	}
	ociPath := filepath.Join(out, "oci")
	if err := os.RemoveAll(ociPath); err != nil {
		return err
	}
	lp, err := layout.Write(ociPath, empty.Index)
	if err != nil {
		return err
	}
	// One entry, named --ref: tools that push a layout (crane push) take
	// one image only.
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag.String()})); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size := int64(len(layerTar))
	fmt.Printf("[image] %s@%s (%d MiB layer)\n", tag, digest, size>>20)
	for _, t := range tags[1:] {
		fmt.Printf("[image] also tagged %s\n", t)
	}
	fmt.Printf("[image] tarball: %s\n[image] OCI layout: %s\n", tarPath, ociPath)
	return nil
}

// tarOf returns a tar of files at the root, all mode 0755 and dated 0 so
// that the layer is reproducible.
func tarOf(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, data := range files {
		hdr := &tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
