package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Teardown removes the node and everything it made; Start registers it
// with t.Cleanup, and calling it earlier (to check for leftovers) makes
// that a no-op. When containerd runs, pods are stopped and removed through
// CRI first; containerd gets SIGTERM, SIGKILL after 5s; then the hard
// sweep (see package doc) removes whatever is left, also after Kill9.
func (n *Node) Teardown() error {
	n.teardownOnce.Do(func() { n.teardownErr = n.teardown() })
	return n.teardownErr
}

func (n *Node) teardown() error {
	began := time.Now()
	// Cleanup runs after t.Context() is canceled: the teardown has its own
	// deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if n.Alive() {
		if err := n.removeAllPods(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.stopDaemon(); err != nil {
		errs = append(errs, err)
	}
	if n.conn != nil {
		n.conn.Close()
	}
	if n.t.Failed() {
		n.t.Log(n.logTail(60))
	}
	rep, err := instance{dir: n.Dir}.sweep(ctx)
	errs = append(errs, err)
	n.mu.Lock()
	n.shims = rep.shimSockets
	n.mu.Unlock()
	if n.lock != nil {
		n.lock.Close() // after the directory is gone: nobody sweeps it meanwhile
	}
	n.t.Logf("containerd %s node %s torn down in %v; hard sweep: %v", n.Version, n.Dir, time.Since(began).Round(time.Millisecond), rep)
	return errors.Join(errs...)
}

// removeAllPods stops and removes every sandbox (and so its containers)
// through CRI, like a kubelet draining the node.
func (n *Node) removeAllPods(ctx context.Context) error {
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := n.Runtime.ListPodSandbox(callCtx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range resp.GetItems() {
		if err := n.StopPod(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
		}
		if err := n.RemovePod(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of the node still exists: its directory, mounts
// below it, loop devices backed by files in it, its cgroup parent in any
// hierarchy, processes in that cgroup or naming the directory on their
// command line (containerd, shims), and shim sockets. After Teardown it
// should be empty.
func (n *Node) Leftovers() []string {
	n.mu.Lock()
	sockets := n.shims
	n.mu.Unlock()
	return leftovers(instance{dir: n.Dir}, sockets)
}

// LeftoversOf is Leftovers for the node directory dir of a node this
// process did not start (one left by a crashed test process): the shim
// sockets it checks are those its bundles name.
func LeftoversOf(dir string) []string {
	i := instance{dir: dir}
	return leftovers(i, i.knownShimSockets())
}

func leftovers(i instance, shimSockets []string) []string {
	var out []string
	if _, err := os.Stat(i.dir); err == nil {
		out = append(out, "directory "+i.dir)
	}
	mounts, err := readMounts()
	if err != nil {
		out = append(out, "cannot read mountinfo: "+err.Error())
	}
	for _, mp := range mountsUnder(mounts, i.dir) {
		out = append(out, "mount "+mp)
	}
	for _, dev := range loopDevicesBackedBy(i.dir) {
		out = append(out, "loop device "+dev)
	}
	for _, h := range cgroupHierarchies(mounts) {
		d := filepath.Join(h, i.cgroupParent())
		if _, err := os.Stat(d); err == nil {
			out = append(out, "cgroup "+d)
			for _, pid := range cgroupProcsUnder(d) {
				out = append(out, fmt.Sprintf("process %d in cgroup %s", pid, d))
			}
		}
	}
	for _, p := range processes(func(_ int, args []string) bool {
		for _, a := range args {
			if within(a, i.dir) || strings.Contains(a, i.dir+"/") {
				return true
			}
		}
		return false
	}) {
		out = append(out, fmt.Sprintf("process %d: %s", p.pid, strings.Join(p.args, " ")))
	}
	for _, s := range shimSockets {
		if _, err := os.Lstat(s); err == nil {
			out = append(out, "shim socket "+s)
		}
	}
	return out
}
