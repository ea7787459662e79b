package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// NodeLockFileName is the file in the state directory that names the agent
// whose node GC holds the state directory's lock. The lock itself is an
// flock(2) on the directory: one node GC per state directory, so one per
// node as deployed. Two agents on a node (a second install with ports of
// its own, `nodegc run` by hand with its own config) would otherwise both
// list, remove and post events, and overwrite each other's state file. The
// kernel drops the lock when its holder exits, however it exits: no stale
// lock outlives a crash or a kill -9. Locking the directory, not a file in
// it, needs no write access, and no removal of the directory's contents
// (rm -rf stateDirectory/*) can let a second agent in beside the first.
const NodeLockFileName = "nodegc.lock"

// nodeLockRetry is how often an agent on standby tries the lock again.
const nodeLockRetry = time.Second

// errLocked: another process holds the lock.
var errLocked = errors.New("held by another nodegc")

// nodeLock is a held lock; release (or the process's exit) lets it go.
type nodeLock struct {
	dir *os.File
	// holderErr says why NodeLockFileName does not name this holder
	// (writeHolder), nil when it does.
	holderErr error
}

// tryNodeLock takes the lock on dir without waiting. When another process
// holds it, the error wraps errLocked and holder is what that process wrote
// in NodeLockFileName (holderName), "" if nothing could be read. Any other
// error means the directory could not be made, opened or locked at all.
func tryNodeLock(dir, me string) (l *nodeLock, holder string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, "", err
	}
	switch err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		d.Close()
		return nil, readHolder(dir), fmt.Errorf("%s: %w", dir, errLocked)
	case err != nil:
		d.Close()
		return nil, "", fmt.Errorf("flock %s: %w", dir, err)
	}
	// Who holds it, for the log of an agent that waits and `nodegc plan`:
	// written whole, then renamed over the last holder's, so that a reader
	// never sees half a name. A failed write (a full or read-only
	// directory) only makes those say the holder is unknown.
	return &nodeLock{dir: d, holderErr: writeHolder(dir, me)}, "", nil
}

// writeHolder replaces NodeLockFileName in dir with me, atomically. When
// that fails it removes the last holder's file, or empties it, so that
// no reader is told of a holder that may be long gone: the holder is then
// unknown (readHolder gives ""). The error says why the file does not
// name me, and whether it still names the last holder.
func writeHolder(dir, me string) error {
	err := replaceHolder(dir, me)
	if err == nil {
		return nil
	}
	path := filepath.Join(dir, NodeLockFileName)
	rerr := os.Remove(path)
	if rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
		return err
	}
	// Emptying needs no space, and may be allowed where removing is not
	// (a directory that is not writable, a file that is).
	if terr := os.Truncate(path, 0); terr != nil {
		return fmt.Errorf("%w; the last holder's %s could be neither removed nor emptied (%v), and still names that holder", err, NodeLockFileName, rerr)
	}
	return err
}

// replaceHolder writes me to a temporary file in dir and renames it over
// NodeLockFileName. A variable, so that a test can make it fail as a full
// or read-only state directory does.
var replaceHolder = func(dir, me string) error {
	f, err := os.CreateTemp(dir, NodeLockFileName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // no-op after the rename
	_, err = f.WriteString(me + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, NodeLockFileName))
}

// unknownHolder is what the log and `nodegc plan` say of a holder that
// NodeLockFileName does not name.
const unknownHolder = "unknown (" + NodeLockFileName + " names none: its holder could not write it, as in a full or read-only state directory)"

// readHolder returns who the holder file in dir names (writeHolder), ""
// if it cannot be read.
func readHolder(dir string) string {
	f, err := os.Open(filepath.Join(dir, NodeLockFileName))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 512))
	return strings.TrimSpace(string(b))
}

func (l *nodeLock) release() {
	if l != nil {
		l.dir.Close() // drops the flock
	}
}

// NodeGCHolder says, for `nodegc plan`, whether a nodegc runs node GC on
// the state directory dir now (holds its lock), and who, as it wrote it
// ("" if unknown). It takes the lock shared for an instant, without
// waiting, and writes nothing: an agent trying the lock at that instant
// tries again a second later.
func NodeGCHolder(dir string) (running bool, holder string, err error) {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	defer d.Close() // drops a shared lock taken
	switch err := unix.Flock(int(d.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, readHolder(dir), nil
	case err != nil:
		return false, "", fmt.Errorf("flock %s: %w", dir, err)
	}
	return false, "", nil
}

// holderName says who this process is, for NodeLockFileName: its pod
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

// acquireNodeLock takes the node lock on dir, waiting (on standby) while
// another agent holds it. It returns nil, false when ctx ends first. When
// the directory cannot be made, opened or locked at all at the first try,
// the node GC goes on without the lock (logged): that says nothing of
// another agent. Once on standby, only
// the lock ends the wait: a retry that fails otherwise is no sign that the
// other agent stopped.
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
			if l.holderErr != nil {
				logger.Error(l.holderErr, "Cannot write this agent's name to the state directory's lock file; another nodegc on this node and `nodegc plan` will say the holder is unknown",
					"file", filepath.Join(dir, NodeLockFileName))
			}
			return l, true
		case !errors.Is(err, errLocked) && waiting:
			logger.V(2).Info("Cannot try the state directory's lock; still waiting for the other nodegc", "err", err)
		case !errors.Is(err, errLocked):
			logger.Error(err, "Cannot lock the state directory; node GC goes on without the guard against a second nodegc on this node", "stateDirectory", dir)
			return nil, true
		case !waiting:
			waiting = true
			standby(true)
			if holder == "" {
				holder = unknownHolder
			}
			logger.Info("Another nodegc runs node GC on this node (it holds the state directory's lock); this one collects nothing and waits for it to stop",
				"holder", holder, "stateDirectory", dir)
		}
		select {
		case <-ctx.Done():
			standby(false)
			return nil, false
		case <-clk.After(nodeLockRetry):
		}
	}
}
