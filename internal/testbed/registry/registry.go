package registry

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"sync"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"

	"github.com/nodegc/nodegc/internal/testbed"
)

// Registry is an in-process OCI registry listening on 127.0.0.1 plus the
// image builder that pushes to it.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of every reference.
	Host string

	srv     *httptest.Server
	testbin string
	blobs   *blobStore

	mu      sync.Mutex // guards padding
	padding map[LayerSpec]*memLayer
}

// The testbin layer is the same in every registry of the process: built
// once (compressing it under -race takes a while).
var (
	binaryOnce  sync.Once
	binaryBuilt *memLayer
	binaryErr   error
)

// New builds testbin (see Testbin) and starts a registry. Close stops it.
func New(ctx context.Context) (*Registry, error) {
	bin, err := Testbin(ctx)
	if err != nil {
		return nil, err
	}
	blobs := newBlobStore()
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)), ggcrregistry.WithBlobHandler(blobs)))
	return &Registry{
		Host:    strings.TrimPrefix(srv.URL, "http://"),
		srv:     srv,
		testbin: bin,
		blobs:   blobs,
		padding: map[LayerSpec]*memLayer{},
	}, nil
}

// Start is New for a test: it fails the test on error and closes the
// registry in t.Cleanup.
func Start(t testbed.TB) *Registry {
	t.Helper()
	r, err := New(t.Context())
	if err != nil {
		t.Fatalf("start registry: %v", err)
	}
	t.Cleanup(r.Close)
	return r
}

// Close stops the registry server. Pulls after Close fail.
func (r *Registry) Close() { r.srv.Close() }

// Ref returns the reference of repo:tag in this registry.
func (r *Registry) Ref(repo, tag string) string { return fmt.Sprintf("%s/%s:%s", r.Host, repo, tag) }

// TestbinPath is the path of the testbin binary in the images' first layer.
func (r *Registry) TestbinPath() string { return r.testbin }

func (r *Registry) binaryLayer() (*memLayer, error) {
	binaryOnce.Do(func() { binaryBuilt, binaryErr = binaryLayer(r.testbin) })
	return binaryBuilt, binaryErr
}

func (r *Registry) paddingLayer(spec LayerSpec) (*memLayer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.padding[spec]; ok {
		return l, nil
	}
	l, err := paddingLayer(spec)
	if err != nil {
		return nil, err
	}
	r.padding[spec] = l
	return l, nil
}
