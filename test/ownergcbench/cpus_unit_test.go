package ownergcbench

import (
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitCPUs(t *testing.T) {
	var all unix.CPUSet
	all.Set(0)
	all.Set(1)
	all.Set(3)
	for _, tc := range []struct {
		v               string
		server, clients string
		ok              bool
		err             string
	}{
		{v: "", clients: "0,1,3"},
		{v: "0", server: "0", clients: "1,3", ok: true},
		{v: " 3, 1", server: "1,3", clients: "0", ok: true},
		{v: "2", err: `"2" is not one of the bench's CPUs (0,1,3)`},
		{v: "0,x", err: `"x" is not one of the bench's CPUs`},
		{v: "-1", err: `"-1" is not one of`},
		{v: "0,1,3", err: "leaves no CPU for the deleters"},
	} {
		server, clients, ok, err := splitCPUs(tc.v, all)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("splitCPUs(%q): error %v, want one with %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("splitCPUs(%q): %v", tc.v, err)
			continue
		}
		if got := cpuList(server); got != tc.server || cpuList(clients) != tc.clients || ok != tc.ok {
			t.Errorf("splitCPUs(%q) = server %q, clients %q, ok %v; want %q, %q, %v", tc.v, got, cpuList(clients), ok, tc.server, tc.clients, tc.ok)
		}
	}
}

// TestPinProcess pins a child process to one of the bench's CPUs and reads
// the affinity of its thread back.
func TestPinProcess(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	var one unix.CPUSet
	one.Set(cpuNumbers(all)[0])
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	if err := pinProcess(child.Process.Pid, one); err != nil {
		t.Fatal(err)
	}
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(child.Process.Pid, &got); err != nil {
		t.Fatal(err)
	}
	if got != one {
		t.Fatalf("child's CPUs after pinProcess: %s, want %s", cpuList(got), cpuList(one))
	}
}
