package testbed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContainerd16Version: Containerd16 is checked to be a 1.6.x from what
// `containerd --version` says (Debian's, a release's, a newer one, a
// binary that fails).
func TestContainerd16Version(t *testing.T) {
	for _, tc := range []struct {
		output string // of --version
		exit   int
		want   string
		is16   bool
	}{
		{"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", 0, "1.6.20~ds1", true},
		{"containerd github.com/containerd/containerd v1.6.38 ab5b5ba", 0, "v1.6.38", true},
		{"containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+b4", 0, "1.7.24~ds1", false},
		{"containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7", 0, "v2.1.4", false},
		{"containerd: cannot run", 1, "(", false},
		{"1.6.0", 0, "(", false},
	} {
		bin := filepath.Join(t.TempDir(), "containerd")
		script := "#!/bin/sh\necho '" + tc.output + "'\nexit " + string(rune('0'+tc.exit)) + "\n"
		if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		got := containerdVersion(bin)
		if !strings.HasPrefix(got, tc.want) || tc.want != "(" && got != tc.want {
			t.Errorf("%q (exit %d): version %q, want %q", tc.output, tc.exit, got, tc.want)
		}
		if isContainerd16(got) != tc.is16 {
			t.Errorf("%q: isContainerd16(%q) = %v, want %v", tc.output, got, !tc.is16, tc.is16)
		}
	}
}
