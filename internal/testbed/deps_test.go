package testbed

// Keeps the test-bed dependencies in go.mod while the harness packages that
// use them are written.
import (
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/go-containerregistry/pkg/v1/mutate"
	_ "github.com/google/go-containerregistry/pkg/v1/remote"
	_ "github.com/google/go-containerregistry/pkg/v1/tarball"
	_ "github.com/google/go-containerregistry/pkg/v1/empty"
	_ "k8s.io/cri-api/pkg/apis/runtime/v1"
	_ "google.golang.org/grpc"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/metadata"
	_ "github.com/containerd/containerd/v2/client"
	_ "github.com/google/cadvisor/fs"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/utils/clock"
)
