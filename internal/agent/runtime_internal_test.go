package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// TestExplainSocketSymlink: a runtime socket path that is a symbolic link
// whose target is not reachable in nodegc's container (containerd's socket
// linked to k3s's, with only /run/containerd mounted) is named as such,
// with its target and what to do, not as "no such file or directory",
// which an operator who sees the socket on the host cannot act on. A
// relative link is resolved from its directory; a missing path, a file
// that is no socket and a link to a live socket keep their messages.
func TestExplainSocketSymlink(t *testing.T) {
	dir := t.TempDir()
	explain := func(path string) string {
		return newRuntimeLink(klog.Background(), "unix://"+path, clock.RealClock{}).explain()
	}

	dangling := filepath.Join(dir, "containerd.sock")
	if err := os.Symlink("/run/k3s/containerd/containerd.sock", dangling); err != nil {
		t.Fatal(err)
	}
	got := explain(dangling)
	for _, want := range []string{
		dangling + " is a symbolic link to /run/k3s/containerd/containerd.sock, which is not reachable in nodegc's container",
		"set containerRuntimeEndpoint to unix:///run/k3s/containerd/containerd.sock and mount its directory, /run/k3s/containerd",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("dangling link: explain() = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "no such file or directory") {
		t.Errorf("dangling link: explain() = %q says the socket does not exist", got)
	}

	relative := filepath.Join(dir, "relative.sock")
	if err := os.Symlink("../elsewhere/runtime.sock", relative); err != nil {
		t.Fatal(err)
	}
	if got, want := explain(relative), "is a symbolic link to "+filepath.Join(filepath.Dir(dir), "elsewhere", "runtime.sock"); !strings.Contains(got, want) {
		t.Errorf("relative link: explain() = %q, want it to contain %q", got, want)
	}

	if got := explain(filepath.Join(dir, "absent.sock")); !strings.Contains(got, "no such file or directory") {
		t.Errorf("missing path: explain() = %q, want the stat error", got)
	}
	file := filepath.Join(dir, "file.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := explain(file); !strings.Contains(got, "is not a socket") {
		t.Errorf("regular file: explain() = %q, want it named no socket", got)
	}

	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	linked := filepath.Join(dir, "linked.sock")
	if err := os.Symlink(live, linked); err != nil {
		t.Fatal(err)
	}
	if got := explain(linked); got != "" {
		t.Errorf("link to a live socket: explain() = %q, want nothing", got)
	}
}
