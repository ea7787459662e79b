package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// NodeLockFileName is the file in the state directory whose flock(2) the
// node GC holds while it runs: one node GC per state directory, so one per
// node as deployed. Two agents on a node (two installs, a rollout with
// maxSurge, `nodegc run` by hand beside the DaemonSet) would otherwise both
// list, remove and post events, and overwrite each other's state file. The
// kernel drops the lock when its holder exits, however it exits: no stale
// lock outlives a crash or a kill -9.
const NodeLockFileName = "nodegc.lock"

// nodeLockRetry is how often an agent on standby tries the lock again.
const nodeLockRetry = time.Second

// errLocked: another process holds the lock.
var errLocked = errors.New("held by another nodegc")

// nodeLock is a held lock; release (or the process's exit) lets it go.
type nodeLock struct{ f *os.File }

// tryNodeLock takes the lock in dir without waiting. When another process
// holds it, the error wraps errLocked and holder is what that process wrote
// in the file (holderName), "" if nothing could be read. Any other error means the file could
// not be made or locked at all.
func tryNodeLock(dir, me string) (l *nodeLock, holder string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(filepath.Join(dir, NodeLockFileName), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, "", err
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		b := make([]byte, 512)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		return nil, strings.TrimSpace(string(b[:n])), fmt.Errorf("%s: %w", f.Name(), errLocked)
	case err != nil:
		f.Close()
		return nil, "", fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	// Who holds it, for the log of an agent that waits. A failed write
	// only makes that log less helpful.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(me+"\n"), 0)
	}
	return &nodeLock{f: f}, "", nil
}

func (l *nodeLock) release() {
	if l != nil {
		l.f.Close() // drops the flock
	}
}

// holderName says who this process is, for the lock file: its pod
// (POD_NAMESPACE and POD_NAME, which the DaemonSet sets from the downward
// API), else its host name (on the host network, the node's), with its PID
// and since when.
func holderName(now time.Time) string {
	who := os.Getenv("POD_NAMESPACE") + "/" + os.Getenv("POD_NAME")
	if os.Getenv("POD_NAME") == "" {
		who, _ = os.Hostname()
	} else {
		who = "pod " + who
	}
	return fmt.Sprintf("%s (pid %d) since %s", who, os.Getpid(), now.UTC().Format(time.RFC3339))
}

// acquireNodeLock takes the node lock in dir, waiting (on standby) while
// another agent holds it. It returns nil, false when ctx ends first. When
// the lock file cannot be made or locked at all (a read-only state
// directory), the node GC goes on without it: that says nothing of another
// agent, and the state saves fail and say so anyway.
func acquireNodeLock(ctx context.Context, dir string, clk clock.Clock, standby func(bool)) (*nodeLock, bool) {
	logger := klog.FromContext(ctx)
	began := clk.Now()
	waiting := false
	for {
		l, holder, err := tryNodeLock(dir, holderName(clk.Now()))
		switch {
		case err == nil:
			if waiting {
				standby(false)
				logger.Info("Took over node GC: the other nodegc on this node stopped", "waited", clk.Since(began).Round(time.Millisecond))
			}
			return l, true
		case !errors.Is(err, errLocked):
			logger.Error(err, "Cannot lock the state directory; node GC goes on without the guard against a second nodegc on this node", "stateDirectory", dir)
			return nil, true
		case !waiting:
			waiting = true
			standby(true)
			if holder == "" {
				holder = "unknown"
			}
			logger.Info("Another nodegc runs node GC on this node (it holds the state directory's lock); this one collects nothing and waits for it to stop",
				"holder", holder, "lock", filepath.Join(dir, NodeLockFileName))
		}
		select {
		case <-ctx.Done():
			standby(false)
			return nil, false
		case <-clk.After(nodeLockRetry):
		}
	}
}
