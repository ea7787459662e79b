package testbed

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

const module = "module github.com/nodegc/nodegc"

// TB is the part of testing.TB the test-bed harnesses use. *testing.T,
// *testing.B and testing.TB satisfy it; a program that is not a test (the
// demo, hack/demo) provides its own implementation. As with testing, Fatalf
// and Skipf do not return (they end the calling goroutine), the functions
// given to Cleanup run in reverse order once the test or program is done, and
// Context is cancelled just before they run.
type TB interface {
	Helper()
	Log(args ...any)
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
	Failed() bool
	Context() context.Context
}

// InCI reports whether the tests run in CI, where a missing prerequisite is
// a failure rather than a skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require stops the test when ok is false: t.Fatal under CI=true, else
// t.Skip. why says what is missing and how to get it.
func Require(t TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("missing test prerequisite (CI=true, so this fails instead of skipping): %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// RequireRoot stops the test unless it runs as root.
func RequireRoot(t TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "this test needs root (it runs containerd, mounts filesystems and creates cgroups)")
}

// BootID returns this machine's boot ID, as the kubelet reports it in its
// Node's status.nodeInfo.bootID (and nodegc compares with its Node's).
func BootID(t TB) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatalf("this machine's boot ID: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// RepoRoot returns the root of the nodegc repository, found by walking up
// from the working directory to the go.mod of this module.
var RepoRoot = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && len(data) >= len(module) && string(data[:len(module)]) == module {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of github.com/nodegc/nodegc above the working directory")
		}
		dir = parent
	}
})

// ToolsDir returns the directory of the test-bed tools: $NODEGC_TOOLS_DIR
// (an absolute path, as hack/install-tools.sh, which honours it too,
// requires), else _output/tools in the repository.
func ToolsDir() string {
	if d := os.Getenv("NODEGC_TOOLS_DIR"); d != "" {
		return d
	}
	root, err := RepoRoot()
	if err != nil {
		return filepath.Join("_output", "tools")
	}
	return filepath.Join(root, "_output", "tools")
}

// Binary returns the path of a tool under ToolsDir()/bin (etcd,
// kube-apiserver, kube-controller-manager, crictl), stopping the test (see
// Require) if it is missing.
func Binary(t TB, name string) string {
	t.Helper()
	p := filepath.Join(ToolsDir(), "bin", name)
	Require(t, isExecutable(p), fmt.Sprintf("%s not found at %s; run `make tools` (hack/install-tools.sh) to build it", name, p))
	return p
}

// ContainerdVersion names one of the two containerd builds the tests use.
type ContainerdVersion string

const (
	// Containerd16 is Debian's containerd 1.6 (apt), with its own shim;
	// Containerd checks that /usr/bin/containerd is a 1.6.x.
	Containerd16 ContainerdVersion = "1.6"
	// Containerd2 is containerd 2.x built from the module proxy at the
	// version of the containerd dependency in go.mod.
	Containerd2 ContainerdVersion = "2"
)

// ContainerdVersions lists every containerd the integration tests cover.
var ContainerdVersions = []ContainerdVersion{Containerd16, Containerd2}

// Containerd returns the containerd binary of version v and the directory
// that must lead PATH so that the daemon finds its own
// containerd-shim-runc-v2, stopping the test (see Require) if missing.
func Containerd(t TB, v ContainerdVersion) (bin, shimDir string) {
	t.Helper()
	switch v {
	case Containerd16:
		bin, shimDir = "/usr/bin/containerd", "/usr/bin"
	case Containerd2:
		shimDir = filepath.Join(ToolsDir(), "containerd2", "bin")
		bin = filepath.Join(shimDir, "containerd")
	default:
		t.Fatalf("unknown containerd version %q", v)
	}
	for _, p := range []string{bin, filepath.Join(shimDir, "containerd-shim-runc-v2")} {
		Require(t, isExecutable(p), fmt.Sprintf("containerd %s: %s not found; run `make tools` (hack/install-tools.sh)", v, p))
	}
	if v == Containerd16 {
		got := containerdVersion(bin)
		Require(t, isContainerd16(got), fmt.Sprintf(
			"containerd 1.6: %s is %s, not a 1.6.x; the tests need Debian 12's containerd 1.6 there, with its shim in %s: on Debian 12 (bookworm), "+
				"`make tools` installs it; elsewhere install a containerd 1.6.x release (containerd, containerd-shim-runc-v2) into /usr/bin by hand "+
				"and keep apt from replacing it (hack/install-tools.sh says how)", bin, got, shimDir))
	}
	return bin, shimDir
}

// isContainerd16 reports whether a version containerdVersion returned is
// a 1.6.x.
func isContainerd16(version string) bool {
	return strings.HasPrefix(strings.TrimPrefix(version, "v"), "1.6.")
}

// containerdVersions caches containerdVersion's answers, per binary.
var containerdVersions sync.Map

// containerdVersion returns the version `bin --version` reports (its third
// word: "containerd github.com/containerd/containerd 1.6.20~ds1 ..."), or
// what went wrong, in parentheses.
func containerdVersion(bin string) string {
	if v, ok := containerdVersions.Load(bin); ok {
		return v.(string)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	v := fmt.Sprintf("(%s --version: %v: %s)", bin, err, bytes.TrimSpace(out))
	if f := strings.Fields(string(out)); err == nil && len(f) >= 3 {
		v = f[2]
	}
	containerdVersions.Store(bin, v)
	return v
}

// Runc returns the runc binary both containerd versions use.
func Runc(t TB) string {
	t.Helper()
	p, err := exec.LookPath("runc")
	if err != nil {
		p = "/usr/sbin/runc"
	}
	Require(t, isExecutable(p), "runc not found; run `make tools` (it installs Debian's runc)")
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
