package kubecluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Paths the kubelet uses whatever its --root-dir says (the device plugin
// socket and the /var/log/containers links). Only
// one kubelet may use them at a time: machineLock serializes kubeclusters
// across test processes.
const (
	containerLogsDir  = "/var/log/containers"
	kubeletStateDir   = "/var/lib/kubelet"
	devicePluginsDir  = "/var/lib/kubelet/device-plugins"
	machineLockPath   = "/tmp/nodegc-kubecluster.lock"
	instanceDirPrefix = "/tmp/ngc-" // internal/testbed/node's instance directories
)

// kubeletFiles are the files the kubelet creates in devicePluginsDir.
var kubeletFiles = []string{"kubelet.sock", "kubelet_internal_checkpoint"}

// hostDirs are the fixed directories the kubelet creates when missing,
// parents first. The ones a kubecluster created are removed again when
// empty at teardown (and by the next Start after a crash: the lock file
// lists them).
var hostDirs = []string{kubeletStateDir, devicePluginsDir, containerLogsDir}

// machineLock is an flock on machineLockPath held for a kubecluster's
// lifetime. The file lists the fixed directories that kubecluster created,
// so that whoever takes the lock after a crash can remove them.
type machineLock struct {
	f       *os.File
	created []string
	// createdAtStart keeps created after release, for the leftover check.
	createdAtStart []string
}

// lockMachine takes the machine lock, waiting for another kubecluster to
// finish.
func lockMachine(ctx context.Context, logf func(string, ...any)) (*machineLock, error) {
	f, err := os.OpenFile(machineLockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", machineLockPath, err)
		}
		if !logged {
			logf("another kubecluster holds %s (one kubelet per machine): waiting", machineLockPath)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for %s: %w", machineLockPath, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Under the lock no kubelet of a kubecluster runs. Another kubelet
	// (this machine is a real node) owns the fixed paths: do not touch them.
	for _, pid := range otherKubelets() {
		f.Close()
		return nil, fmt.Errorf("a kubelet not started by a kubecluster runs on this machine (pid %d: %s): it owns %s and %s, which a test kubelet would share; run the tests on a machine that is not a Kubernetes node",
			pid, strings.Join(procArgs(pid), " "), devicePluginsDir, containerLogsDir)
	}
	return &machineLock{f: f}, nil
}

// otherKubelets lists the PIDs of running kubelet processes (detection
// only: nothing here signals them).
func otherKubelets() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if args := procArgs(pid); len(args) > 0 && filepath.Base(args[0]) == "kubelet" {
			out = append(out, pid)
		}
	}
	return out
}

// sweepStale removes what a kubecluster that died without tearing down
// left in the fixed paths: the kubelet's files, the log links into node
// directories that no longer exist (call it after node.SweepStale, which
// removes those of dead test processes), and the fixed directories it
// created, once empty. Then it records which fixed directories this
// cluster will create.
func (l *machineLock) sweepStale(logf func(string, ...any)) error {
	stale := l.readCreated()
	if n := sweepHostPaths(""); n > 0 {
		logf("removed %d stale kubelet files and log links left by an earlier run", n)
	}
	removeEmptyDirs(stale)
	l.created = nil
	for _, d := range hostDirs {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			l.created = append(l.created, d)
		}
	}
	l.createdAtStart = slices.Clone(l.created)
	return l.writeCreated()
}

func (l *machineLock) readCreated() []string {
	var out []string
	sc := bufio.NewScanner(l.f)
	for sc.Scan() {
		if d := strings.TrimSpace(sc.Text()); slices.Contains(hostDirs, d) {
			out = append(out, d)
		}
	}
	return out
}

func (l *machineLock) writeCreated() error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(strings.Join(l.created, "\n")+"\n"), 0)
	return err
}

// release removes the fixed directories this kubecluster created (if
// empty) and unlocks.
func (l *machineLock) release() {
	if l == nil {
		return
	}
	removeEmptyDirs(l.created)
	l.created = nil
	l.writeCreated()
	l.unlock()
}

func (l *machineLock) unlock() { l.f.Close() }

// removeEmptyDirs removes the directories that exist and are empty,
// children first.
func removeEmptyDirs(dirs []string) {
	for i := len(dirs) - 1; i >= 0; i-- {
		unix.Rmdir(dirs[i]) // fails harmlessly when not empty or gone
	}
}

// sweepHostPaths removes the kubelet's files in devicePluginsDir and the
// *.log links in containerLogsDir that point into a test-bed node directory:
// into nodeDir when given, else into any /tmp/ngc-* directory that no longer
// exists. It returns how many it removed.
func sweepHostPaths(nodeDir string) int {
	n := 0
	for _, name := range kubeletFiles {
		if os.Remove(filepath.Join(devicePluginsDir, name)) == nil {
			n++
		}
	}
	for _, l := range testbedLogLinks(nodeDir) {
		if os.Remove(l) == nil {
			n++
		}
	}
	return n
}

// testbedLogLinks lists the links of containerLogsDir whose target lies in
// nodeDir, or (nodeDir "") in a /tmp/ngc-* directory that is gone.
func testbedLogLinks(nodeDir string) []string {
	entries, _ := os.ReadDir(containerLogsDir)
	var out []string
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		p := filepath.Join(containerLogsDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		switch {
		case nodeDir != "":
			if strings.HasPrefix(target, nodeDir+"/") {
				out = append(out, p)
			}
		case strings.HasPrefix(target, instanceDirPrefix):
			dir, _, _ := strings.Cut(strings.TrimPrefix(target, "/tmp/"), "/")
			if _, err := os.Stat(filepath.Join("/tmp", dir)); errors.Is(err, fs.ErrNotExist) {
				out = append(out, p)
			}
		}
	}
	return out
}
