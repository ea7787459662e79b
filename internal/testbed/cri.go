package testbed

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// VersionOnly is a CRI runtime that answers Version, as Runtime at
// RuntimeVersion, and nothing else: every other call is Unimplemented.
type VersionOnly struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	Runtime, RuntimeVersion string
}

// Version answers with v's runtime and its version, at CRI v1.
func (v VersionOnly) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: v.Runtime, RuntimeVersion: v.RuntimeVersion, RuntimeApiVersion: "v1"}, nil
}

// ServeCRI serves rt on a unix socket of its own until the test ends, and
// returns its endpoint (unix://PATH); rt serves images too if it is an
// ImageServiceServer. With rt nil the gRPC server serves no CRI service at
// all, as containerd with its cri plugin disabled (Docker Engine's) does. The socket is in a directory of os.TempDir, not the
// test's, whose long path may pass the 108 bytes a socket path may have.
func ServeCRI(t *testing.T, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if rt != nil {
		runtimeapi.RegisterRuntimeServiceServer(srv, rt)
	}
	if is, ok := rt.(runtimeapi.ImageServiceServer); ok {
		runtimeapi.RegisterImageServiceServer(srv, is)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		os.RemoveAll(dir)
	})
	return "unix://" + sock
}
