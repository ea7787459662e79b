package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
)

// testbinPkg is the import path of the testbin program, relative to the
// repository root.
const testbinPkg = "internal/testbed/testbin"

var (
	testbinOnce sync.Once
	testbinPath string
	testbinErr  error
)

// Testbin returns the path of a static testbin binary, building it with
// `CGO_ENABLED=0 go build` on first use in this process. The binary is cached
// under os.TempDir()/nodegc-testbin/<hash of its sources and Go version>, so
// later test processes reuse it without building. The first call's context
// bounds the build.
func Testbin(ctx context.Context) (string, error) {
	testbinOnce.Do(func() { testbinPath, testbinErr = buildTestbin(ctx) })
	return testbinPath, testbinErr
}

func buildTestbin(ctx context.Context) (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("build testbin: %w", err)
	}
	src := filepath.Join(root, testbinPkg)
	key, err := sourceHash(src)
	if err != nil {
		return "", fmt.Errorf("build testbin: %w", err)
	}
	cacheRoot := filepath.Join(os.TempDir(), "nodegc-testbin")
	dir := filepath.Join(cacheRoot, key)
	bin := filepath.Join(dir, "testbin")
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build testbin: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "testbin-*.tmp")
	if err != nil {
		return "", fmt.Errorf("build testbin: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // no-op after the rename
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", tmp.Name(), "./"+testbinPkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build testbin (go build ./%s): %w: %s", testbinPkg, err, out)
	}
	// Rename is atomic: concurrent test processes building the same
	// sources all end with one complete binary.
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("build testbin: %w", err)
	}
	pruneStale(cacheRoot, key)
	return bin, nil
}

// sourceHash names a build of testbin: the Go version and every file of
// its source directory.
func sourceHash(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", runtime.Version(), runtime.GOARCH)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// pruneStale removes builds of older sources not touched for a day, so the
// cache holds about one binary.
func pruneStale(cacheRoot, keep string) {
	entries, err := os.ReadDir(cacheRoot)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Name() == keep {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			os.RemoveAll(filepath.Join(cacheRoot, e.Name()))
		}
	}
}
