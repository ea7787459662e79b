package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMountInfo(t *testing.T) {
	data := []byte(`22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
42 22 7:0 / /tmp/ngc-1/root rw,relatime - ext4 /dev/loop0 rw
43 42 0:50 / /tmp/ngc-1/root/a\040b rw shared:5 - overlay overlay rw,lowerdir=/x
44 22 0:51 / /tmp/ngc-1/state/x/shm rw,nosuid - tmpfs shm rw,size=65536k
45 22 0:52 / /tmp/ngc-10 rw - tmpfs tmpfs rw
46 22 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
47 22 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
`)
	mounts, err := parseMountInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := mounts[2].mountPoint; got != "/tmp/ngc-1/root/a b" {
		t.Errorf("escaped mount point = %q, want %q", got, "/tmp/ngc-1/root/a b")
	}
	if got := mounts[2].fsType; got != "overlay" {
		t.Errorf("fs type after optional fields = %q, want overlay", got)
	}
	want := []string{"/tmp/ngc-1/state/x/shm", "/tmp/ngc-1/root/a b", "/tmp/ngc-1/root"}
	if diff := cmp.Diff(want, mountsUnder(mounts, "/tmp/ngc-1")); diff != "" {
		t.Errorf("mountsUnder (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"}, cgroupHierarchies(mounts)); diff != "" {
		t.Errorf("cgroupHierarchies (-want +got):\n%s", diff)
	}
}

func TestIsShimOf(t *testing.T) {
	args := []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/tmp/ngc-1/c.sock"}
	for name, tc := range map[string]struct {
		args   []string
		socket string
		want   bool
	}{
		"this instance":      {args, "/tmp/ngc-1/c.sock", true},
		"other instance":     {args, "/tmp/ngc-10/c.sock", false},
		"not a shim":         {[]string{"/usr/bin/containerd", "-address", "/tmp/ngc-1/c.sock"}, "/tmp/ngc-1/c.sock", false},
		"address with equal": {[]string{"containerd-shim-runc-v2", "-address=/tmp/ngc-1/c.sock"}, "/tmp/ngc-1/c.sock", true},
	} {
		if got := isShimOf(tc.args, tc.socket); got != tc.want {
			t.Errorf("%s: isShimOf = %v, want %v", name, got, tc.want)
		}
	}
}

func TestIsInstanceDir(t *testing.T) {
	for dir, want := range map[string]bool{
		"/tmp/ngc-123":                      true,
		"/tmp/ngc-":                         false,
		"/tmp/ngc-12a":                      false,
		"/tmp/ngc-123/root":                 false,
		"/tmp/nodegc-kube-1-2":              false,
		"/var/tmp/ngc-123":                  false,
		instanceDirOf("/tmp/ngc-42/root/x"): true,
	} {
		if got := isInstanceDir(dir); got != want {
			t.Errorf("isInstanceDir(%q) = %v, want %v", dir, got, want)
		}
	}
}
