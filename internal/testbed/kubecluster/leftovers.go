package kubecluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// finalCheck runs after every other cleanup of the cluster: it releases the
// machine lock (removing the fixed directories this cluster created) and
// fails the test if anything of the cluster is left.
func (c *Cluster) finalCheck(t testing.TB) {
	c.lock.release()
	left := c.collectLeftovers()
	c.mu.Lock()
	c.leftovers = left
	c.mu.Unlock()
	if len(left) > 0 {
		t.Errorf("kubecluster: left behind after teardown:\n  %s", strings.Join(left, "\n  "))
		return
	}
	t.Logf("kubecluster: teardown verified: no process (kubelet, kube-scheduler, kube-controller-manager, kube-apiserver, etcd, containerd, shims, containers), mount, cgroup, loop device, kubelet file or log link left")
}

func (c *Cluster) collectLeftovers() []string {
	var out []string
	if c.Node != nil {
		out = append(out, c.Node.Leftovers()...)
		for _, l := range testbedLogLinks(c.Node.Dir) {
			out = append(out, "log link "+l)
		}
	}
	c.mu.Lock()
	procs := []*proc.Process{c.kubelet, c.scheduler}
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil && !p.Exited() {
			out = append(out, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID()))
		}
	}
	for name, pid := range c.apiPIDs {
		// Names are "etcd", "kube-apiserver", "kube-controller-manager-0".
		if args := procArgs(pid); len(args) > 0 && filepath.Base(args[0]) == strings.TrimRight(name, "-0123456789") {
			out = append(out, fmt.Sprintf("process %s (pid %d)", name, pid))
		}
	}
	if c.API != nil {
		if _, err := os.Stat(c.API.Dir); err == nil {
			out = append(out, "directory "+c.API.Dir)
		}
	}
	for _, f := range kubeletFiles {
		if p := filepath.Join(devicePluginsDir, f); exists(p) {
			out = append(out, "kubelet file "+p)
		}
	}
	if c.lock != nil {
		for _, d := range hostDirs {
			if exists(d) && wasCreated(c, d) {
				out = append(out, "directory "+d)
			}
		}
	}
	return out
}

func wasCreated(c *Cluster, dir string) bool {
	for _, d := range c.lock.createdAtStart {
		if d == dir {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func procArgs(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}
