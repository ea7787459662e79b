package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// LayerSpec names a padding layer: a single file of Size pseudo-random,
// incompressible bytes derived from Seed. Equal specs give byte-identical
// layers with equal digests, in any image and any test process.
type LayerSpec struct {
	Seed string
	Size int64
}

// Layer describes one layer of a pushed image.
type Layer struct {
	// Digest is the digest of the compressed blob ("sha256:..."), as listed
	// in the manifest and stored in containerd's content store.
	Digest string
	// DiffID is the digest of the uncompressed tar, as listed in the image
	// config's rootfs.
	DiffID string
	// CompressedSize is the size of the blob in bytes.
	CompressedSize int64
	// UncompressedSize is the size of the uncompressed tar in bytes.
	UncompressedSize int64
	// ContentSize is the size of the files in the layer (for a padding
	// layer, LayerSpec.Size); an unpacked snapshot takes about this much.
	ContentSize int64
}

// epoch is the modification time of every file in a built layer, so that
// builds are reproducible.
var epoch = time.Unix(0, 0).UTC()

// memLayer is a gzip-compressed layer held in memory. It implements
// v1.Layer.
type memLayer struct {
	info       Layer
	compressed []byte
}

var _ v1.Layer = (*memLayer)(nil)

func (l *memLayer) Digest() (v1.Hash, error) { return v1.NewHash(l.info.Digest) }
func (l *memLayer) DiffID() (v1.Hash, error) { return v1.NewHash(l.info.DiffID) }
func (l *memLayer) Size() (int64, error)     { return l.info.CompressedSize, nil }
func (l *memLayer) MediaType() (types.MediaType, error) {
	return types.OCILayer, nil
}
func (l *memLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *memLayer) Uncompressed() (io.ReadCloser, error) {
	return gzip.NewReader(bytes.NewReader(l.compressed))
}

// tarEntry is one file or directory of a layer; a nil body is a directory.
type tarEntry struct {
	name string
	mode int64
	size int64
	body io.Reader
}

// buildLayer writes entries as a tar, gzips it at level and records both
// digests and sizes in one pass.
func buildLayer(entries []tarEntry, level int) (*memLayer, error) {
	var blob bytes.Buffer
	var estimate int64
	for _, e := range entries {
		estimate += e.size + 1024
	}
	blob.Grow(int(estimate + estimate/100 + 4096))
	blobHash := sha256.New()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(&blob, blobHash), level)
	if err != nil {
		return nil, err
	}
	diffHash := sha256.New()
	counter := &countWriter{}
	tw := tar.NewWriter(io.MultiWriter(gz, diffHash, counter))
	var content int64
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX}
		if e.body == nil {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if e.body != nil {
			n, err := io.Copy(tw, e.body)
			if err != nil {
				return nil, fmt.Errorf("tar body %s: %w", e.name, err)
			}
			if n != e.size {
				return nil, fmt.Errorf("tar body %s: got %d bytes, want %d", e.name, n, e.size)
			}
			content += n
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return &memLayer{
		info: Layer{
			Digest:           digestOf(blobHash),
			DiffID:           digestOf(diffHash),
			CompressedSize:   int64(blob.Len()),
			UncompressedSize: counter.n,
			ContentSize:      content,
		},
		compressed: blob.Bytes(),
	}, nil
}

// paddingLayer builds the layer of spec: pad/<seed hash>-<size> holding
// spec.Size bytes of a ChaCha8 stream keyed by the seed. The data does not
// compress, so the gzip stream only stores it (gzip.NoCompression): the
// blob is a few bytes larger than the tar, as with any compressor, and
// building it costs no compression time (which -race multiplies tenfold).
func paddingLayer(spec LayerSpec) (*memLayer, error) {
	if spec.Size < 0 {
		return nil, fmt.Errorf("padding layer %q: negative size %d", spec.Seed, spec.Size)
	}
	key := sha256.Sum256([]byte("nodegc-testbed-layer\x00" + spec.Seed))
	name := fmt.Sprintf("pad/%s-%d", hex.EncodeToString(key[:8]), spec.Size)
	l, err := buildLayer([]tarEntry{
		{name: "pad/", mode: 0o755},
		{name: name, mode: 0o644, size: spec.Size, body: io.LimitReader(rand.NewChaCha8(key), spec.Size)},
	}, gzip.NoCompression)
	if err != nil {
		return nil, fmt.Errorf("padding layer %q (%d bytes): %w", spec.Seed, spec.Size, err)
	}
	return l, nil
}

// binaryLayer builds the layer holding the testbin program at /testbin and
// an empty world-writable /tmp. It is compressed (about 2:1), so that its
// compressed and uncompressed sizes differ visibly.
func binaryLayer(testbin string) (*memLayer, error) {
	f, err := os.Open(testbin)
	if err != nil {
		return nil, fmt.Errorf("testbin layer: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("testbin layer: %w", err)
	}
	l, err := buildLayer([]tarEntry{
		{name: "testbin", mode: 0o755, size: st.Size(), body: f},
		{name: "tmp/", mode: 0o1777},
	}, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("testbin layer from %s: %w", testbin, err)
	}
	return l, nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }
