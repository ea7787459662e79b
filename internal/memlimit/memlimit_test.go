package memlimit

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

// write makes the files of a fake cgroup mount under root.
func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCgroupLimit: the memory limit is read as the kernel shows it to a
// container: cgroup v2 with the container's own cgroup namespace (its
// cgroup is the mount's root), v2 seen from the host's namespace (its path
// under the mount), v1 (the memory controller's hierarchy, per-container
// mount or full path) and hybrid (v1's memory controller beside a v2
// hierarchy without it); "max" and v1's huge value are no limit.
func TestCgroupLimit(t *testing.T) {
	const mib256 = 256 << 20
	cases := map[string]struct {
		files     map[string]string
		cgroup    string
		want      int64
		wantFile  string
		wantError bool
	}{
		"v2, own namespace": {
			files:  map[string]string{"memory.max": "268435456\n"},
			cgroup: "0::/\n", want: mib256, wantFile: "memory.max",
		},
		"v2, host namespace": {
			files:  map[string]string{"kubepods.slice/pod1/ctr/memory.max": "268435456\n"},
			cgroup: "0::/kubepods.slice/pod1/ctr\n", want: mib256, wantFile: "kubepods.slice/pod1/ctr/memory.max",
		},
		"v2, no limit": {
			files:  map[string]string{"memory.max": "max\n"},
			cgroup: "0::/\n", want: 0, wantFile: "memory.max",
		},
		"v1, per-container mount": {
			files:  map[string]string{"memory/memory.limit_in_bytes": "268435456\n"},
			cgroup: "4:memory:/kubepods/pod1/ctr\n3:cpu,cpuacct:/kubepods/pod1/ctr\n", want: mib256, wantFile: "memory/memory.limit_in_bytes",
		},
		"v1, full path, beside other controllers": {
			files: map[string]string{
				"memory/kubepods/pod1/ctr/memory.limit_in_bytes": "268435456\n",
				"memory/memory.limit_in_bytes":                   "9223372036854771712\n",
			},
			cgroup: "5:cpuacct,memory:/kubepods/pod1/ctr\n", want: mib256, wantFile: "memory/kubepods/pod1/ctr/memory.limit_in_bytes",
		},
		"v1, no limit": {
			files:  map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"},
			cgroup: "4:memory:/\n", want: 0, wantFile: "memory/memory.limit_in_bytes",
		},
		"hybrid: v1's memory controller": {
			files:  map[string]string{"memory/x/memory.limit_in_bytes": "268435456\n", "unified/x/cgroup.procs": ""},
			cgroup: "4:memory:/x\n0::/x\n", want: mib256, wantFile: "memory/x/memory.limit_in_bytes",
		},
		"nothing readable": {
			files:  map[string]string{},
			cgroup: "0::/\n", want: 0, wantFile: "",
		},
		"garbage": {
			files:  map[string]string{"memory.max": "lots\n"},
			cgroup: "0::/\n", wantError: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, tc.files)
			got, file, err := cgroupLimit(root, []byte(tc.cgroup))
			if tc.wantError {
				if err == nil {
					t.Fatalf("no error; read %d from %s", got, file)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantFile := ""
			if tc.wantFile != "" {
				wantFile = filepath.Join(root, tc.wantFile)
			}
			if got != tc.want || file != wantFile {
				t.Errorf("limit %d from %q, want %d from %q", got, file, tc.want, wantFile)
			}
		})
	}
}

// TestLowered: a soft limit at or above the cgroup's limit (GOMEMLIMIT from
// the chart's resourceFieldRef is the limit itself, which the kernel may
// hold rounded down to a page) is lowered to 90% of the cgroup's; one below
// it (the operator's own), or no cgroup limit, is kept.
func TestLowered(t *testing.T) {
	const mib256 = 256 << 20
	cases := []struct {
		current, cgroup, want int64
		ok                    bool
	}{
		{mib256, mib256, mib256 * 9 / 10, true},
		{1_000_000_000, 999_997_440, 899_997_696, true}, // 1G, held as whole pages
		{200 << 20, mib256, 0, false},
		{mib256, 0, 0, false},
	}
	for _, tc := range cases {
		got, ok := lowered(tc.current, tc.cgroup)
		if got != tc.want || ok != tc.ok {
			t.Errorf("lowered(%d, %d) = %d, %v; want %d, %v", tc.current, tc.cgroup, got, ok, tc.want, tc.ok)
		}
	}
}

// TestAdjustWithoutGOMEMLIMIT: without GOMEMLIMIT (or with off) the soft
// limit is left alone; on this machine's own cgroup, with GOMEMLIMIT set,
// Adjust reads the cgroup without error and lowers the limit only if the
// cgroup has one at or below it.
func TestAdjust(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	for _, v := range []string{"", "off"} {
		t.Setenv("GOMEMLIMIT", v)
		r, err := Adjust()
		if err != nil || r.Changed || debug.SetMemoryLimit(-1) != before {
			t.Errorf("GOMEMLIMIT=%q: %+v, %v; want nothing changed", v, r, err)
		}
	}
	_, err := os.Stat("/proc/self/cgroup")
	testbed.Require(t, err == nil, fmt.Sprintf("this machine's own cgroup, /proc/self/cgroup: %v", err))
	t.Setenv("GOMEMLIMIT", "1TiB")
	debug.SetMemoryLimit(1 << 40)
	r, err := Adjust()
	if err != nil {
		t.Fatal(err)
	}
	want := int64(1 << 40)
	if r.CgroupLimit > 0 && r.CgroupLimit <= 1<<40 {
		want = int64(float64(r.CgroupLimit) * Fraction)
	}
	if got := debug.SetMemoryLimit(-1); got != want || r.After != want || r.Changed != (want != 1<<40) {
		t.Errorf("%+v, soft limit now %d; want %d", r, got, want)
	}
	t.Logf("this machine's cgroup: limit %d (%s); %+v", r.CgroupLimit, r.CgroupFile, r)
}

// helperEnv makes the test binary TestMain's helper: it waits for a line on
// stdin (its parent moves it into a cgroup meanwhile), runs Adjust and
// prints the soft limit after it.
const helperEnv = "NODEGC_MEMLIMIT_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		var line string
		_, _ = fmt.Scanln(&line)
		r, err := Adjust()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(r.After, r.CgroupLimit)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAdjustInACgroup runs Adjust in a process in a real memory cgroup with
// a 256 MiB limit and GOMEMLIMIT at that limit, as the chart runs the
// agent: its soft limit ends at 90% of it. It needs root and a writable
// cgroup hierarchy (v1's memory controller, or v2): prerequisites, so
// without them it fails under CI=true and is skipped otherwise
// (testbed.Require).
func TestAdjustInACgroup(t *testing.T) {
	testbed.RequireRoot(t)
	const limit = 256 << 20
	self, err := os.ReadFile("/proc/self/cgroup")
	testbed.Require(t, err == nil, fmt.Sprintf("this machine's own cgroup, /proc/self/cgroup: %v", err))
	var dir, limitFile string
	for _, line := range strings.Split(string(self), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if hasController(parts[1], "memory") {
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2], fmt.Sprintf("nodegc-memlimit-%d", os.Getpid())), "memory.limit_in_bytes"
			break
		}
		if parts[0] == "0" && parts[1] == "" {
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				dir, limitFile = filepath.Join("/sys/fs/cgroup", parts[2], fmt.Sprintf("nodegc-memlimit-%d", os.Getpid())), "memory.max"
			}
		}
	}
	testbed.Require(t, dir != "", "a memory cgroup hierarchy (cgroup v1's memory controller, or v2) mounted under /sys/fs/cgroup")
	err = os.Mkdir(dir, 0o755)
	testbed.Require(t, err == nil, fmt.Sprintf("a writable cgroup hierarchy: cannot make a cgroup: %v", err))
	t.Cleanup(func() { _ = os.Remove(dir) })
	err = os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.Itoa(limit)), 0o644)
	testbed.Require(t, err == nil, fmt.Sprintf("a memory controller in the test's cgroup: cannot set the cgroup's memory limit: %v", err))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GOMEMLIMIT="+strconv.Itoa(limit))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		testbed.Require(t, false, fmt.Sprintf("a cgroup a process can be moved into: %v", err))
	}
	fmt.Fprintln(stdin, "go")
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out.String())
	}
	var after, cgroupLimit int64
	if _, err := fmt.Sscan(out.String(), &after, &cgroupLimit); err != nil {
		t.Fatalf("helper's output %q: %v", out.String(), err)
	}
	if cgroupLimit != limit || after != limit*9/10 {
		t.Errorf("in a cgroup limited to %d with GOMEMLIMIT=%d: read limit %d, soft limit %d; want %d", limit, limit, cgroupLimit, after, limit*9/10)
	}
}
