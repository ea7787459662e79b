package registry

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// PauseRepo and PauseTag name the pause-like sandbox image (see PushPause).
const (
	PauseRepo = "pause"
	PauseTag  = "1"
)

// ImageSpec describes an image to build and push.
type ImageSpec struct {
	// Repo is the repository in the registry, e.g. "gc/app".
	Repo string
	// Tag defaults to "latest".
	Tag string
	// Layers are the padding layers stacked on the testbin layer, bottom
	// first. Use the same LayerSpec in several images to share a layer.
	Layers []LayerSpec
	// Entrypoint defaults to ["/testbin"] and Cmd to ["sleep"]; a CRI
	// container's Args replace Cmd.
	Entrypoint []string
	Cmd        []string
	// Labels go into the image config.
	Labels map[string]string
}

// Image describes a pushed image.
type Image struct {
	// Ref is "127.0.0.1:PORT/REPO:TAG", what PullImage takes.
	Ref       string
	Repo, Tag string
	// ManifestDigest is the digest of the manifest ("sha256:...").
	ManifestDigest string
	ManifestSize   int64
	// ConfigDigest is the digest of the image config: the image ID that
	// CRI reports ("sha256:...").
	ConfigDigest string
	ConfigSize   int64
	// Layers are bottom first; Layers[0] is the testbin layer, the same in
	// every image.
	Layers []Layer
	// CompressedSize and UncompressedSize sum the layers.
	CompressedSize, UncompressedSize int64
}

// ID returns the image ID as CRI reports it (the config digest).
func (i *Image) ID() string { return i.ConfigDigest }

// RepoDigest returns "127.0.0.1:PORT/REPO@sha256:...", as CRI lists it in
// Image.RepoDigests.
func (i *Image) RepoDigest() string {
	host, _, _ := cutRef(i.Ref)
	return host + "/" + i.Repo + "@" + i.ManifestDigest
}

// Push builds the image of spec and pushes it. Its config and layers go
// into the registry's blob store in-process (see blobStore); the manifest
// is pushed over HTTP, as a client pushes it. Pushing an equal spec again
// gives the same digests.
func (r *Registry) Push(ctx context.Context, spec ImageSpec) (*Image, error) {
	if spec.Repo == "" {
		return nil, errors.New("push image: empty repository")
	}
	if spec.Tag == "" {
		spec.Tag = "latest"
	}
	ref := r.Ref(spec.Repo, spec.Tag)
	img, layers, err := r.build(spec)
	if err != nil {
		return nil, fmt.Errorf("build image %s: %w", ref, err)
	}
	if err := r.storeBlobs(img, layers); err != nil {
		return nil, fmt.Errorf("push image %s: %w", ref, err)
	}
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return nil, fmt.Errorf("push image %s: %w", ref, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		return nil, fmt.Errorf("push image %s: %w", ref, err)
	}
	return describe(ref, spec, img, layers)
}

// storeBlobs puts the config and layers of img into the blob store.
func (r *Registry) storeBlobs(img v1.Image, layers []*memLayer) error {
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	r.blobs.add(cfgName.String(), cfg)
	for _, l := range layers {
		r.blobs.add(l.info.Digest, l.compressed)
	}
	return nil
}

// PushPause pushes the pause-like sandbox image PauseRepo:PauseTag: the
// testbin layer alone, running `/testbin sleep`, which exits 0 on SIGTERM.
func (r *Registry) PushPause(ctx context.Context) (*Image, error) {
	return r.Push(ctx, ImageSpec{Repo: PauseRepo, Tag: PauseTag, Entrypoint: []string{"/testbin", "sleep"}, Cmd: []string{}})
}

func (r *Registry) build(spec ImageSpec) (v1.Image, []*memLayer, error) {
	bin, err := r.binaryLayer()
	if err != nil {
		return nil, nil, err
	}
	layers := []*memLayer{bin}
	for _, ls := range spec.Layers {
		l, err := r.paddingLayer(ls)
		if err != nil {
			return nil, nil, err
		}
		layers = append(layers, l)
	}
	entrypoint, cmd := spec.Entrypoint, spec.Cmd
	if entrypoint == nil {
		entrypoint = []string{"/testbin"}
	}
	if cmd == nil {
		cmd = []string{"sleep"}
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.OCILayer})
	}
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config.Entrypoint = entrypoint
	cf.Config.Cmd = cmd
	cf.Config.Env = []string{"PATH=/"}
	cf.Config.Labels = spec.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, nil, err
	}
	return img, layers, nil
}

func describe(ref string, spec ImageSpec, img v1.Image, layers []*memLayer) (*Image, error) {
	mDigest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	mSize, err := img.Size()
	if err != nil {
		return nil, err
	}
	cDigest, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	out := &Image{
		Ref:            ref,
		Repo:           spec.Repo,
		Tag:            spec.Tag,
		ManifestDigest: mDigest.String(),
		ManifestSize:   mSize,
		ConfigDigest:   cDigest.String(),
		ConfigSize:     int64(len(raw)),
	}
	for _, l := range layers {
		out.Layers = append(out.Layers, l.info)
		out.CompressedSize += l.info.CompressedSize
		out.UncompressedSize += l.info.UncompressedSize
	}
	return out, nil
}

// cutRef splits "host/repo:tag" into its parts.
func cutRef(ref string) (host, repo, tag string) {
	r, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", "", ""
	}
	return r.RegistryStr(), r.RepositoryStr(), r.TagStr()
}
