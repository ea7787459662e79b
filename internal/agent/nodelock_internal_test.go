package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestNodeLock: the second taker of a state directory's lock is refused
// and told who holds it; once released, the lock can be taken again.
// (flock locks belong to open files, so two takers in one process conflict
// as two processes do.)
func TestNodeLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, _, err := tryNodeLock(dir, "first-pod (pid 1) since then")
	if err != nil {
		t.Fatal(err)
	}
	second, holder, err := tryNodeLock(dir, "second-pod (pid 1) since now")
	if !errors.Is(err, errLocked) || second != nil {
		t.Fatalf("second take while the first holds it: %v, %v; want errLocked", second, err)
	}
	if holder != "first-pod (pid 1) since then" {
		t.Errorf("holder = %q, want the first taker's name", holder)
	}
	first.release()
	second, _, err = tryNodeLock(dir, "second-pod")
	if err != nil {
		t.Fatalf("take after the release: %v", err)
	}
	second.release()
	b, err := os.ReadFile(filepath.Join(dir, NodeLockFileName))
	if err != nil || string(b) != "second-pod\n" {
		t.Errorf("holder file holds %q (%v), want the last taker's name alone", b, err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("state directory holds %v (%v), want the holder file alone (no temporary file left)", entries, err)
	}
}

// TestAcquireNodeLockWaits: an agent whose lock is held waits on standby
// (the gauge says so), takes the lock once it is released, and leaves
// standby; one stopped while it waits returns at once, off standby.
func TestAcquireNodeLockWaits(t *testing.T) {
	dir := t.TempDir()
	held, _, err := tryNodeLock(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.NewFakeClock(time.Now())
	var standby standbyLog
	type result struct {
		l  *nodeLock
		ok bool
	}
	done := make(chan result, 1)
	go func() {
		l, ok := acquireNodeLock(t.Context(), dir, clk, standby.record)
		done <- result{l, ok}
	}()
	waitForWaiters(t, clk)
	clk.Step(nodeLockRetry)
	waitForWaiters(t, clk)
	select {
	case r := <-done:
		t.Fatalf("acquired (%v) while another holds the lock", r.ok)
	default:
	}
	held.release()
	clk.Step(nodeLockRetry)
	r := <-done
	if !r.ok || r.l == nil {
		t.Fatalf("after the release: lock %v, ok %v; want it taken", r.l, r.ok)
	}
	defer r.l.release()
	standby.wantOnAndOff(t)

	// Stopped while waiting.
	ctx, cancel := context.WithCancel(t.Context())
	standby = standbyLog{}
	go func() {
		l, ok := acquireNodeLock(ctx, dir, clk, standby.record)
		done <- result{l, ok}
	}()
	waitForWaiters(t, clk)
	cancel()
	select {
	case r := <-done:
		if r.ok || r.l != nil {
			t.Errorf("stopped while waiting: lock %v, ok %v; want none", r.l, r.ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after its context ended")
	}
	standby.wantOnAndOff(t)
}

// standbyLog records the standby calls of acquireNodeLock.
type standbyLog struct {
	mu     sync.Mutex
	states []bool
}

func (s *standbyLog) record(on bool) {
	s.mu.Lock()
	s.states = append(s.states, on)
	s.mu.Unlock()
}

// wantOnAndOff checks that standby went on, then off, once.
func (s *standbyLog) wantOnAndOff(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.states) != 2 || !s.states[0] || s.states[1] {
		t.Errorf("standby went %v, want [true false]", s.states)
	}
}

// TestNodeLockUnusable: a state directory that cannot be made does not
// stop the node GC (that says nothing of another agent).
func TestNodeLockUnusable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := tryNodeLock(filepath.Join(file, "state"), "me")
	if err == nil || errors.Is(err, errLocked) {
		t.Fatalf("lock under a regular file: %v, want an error other than errLocked", err)
	}
	l, ok := acquireNodeLock(t.Context(), filepath.Join(file, "state"), clock.RealClock{}, func(bool) { t.Error("standby with no state directory") })
	if !ok || l != nil {
		t.Errorf("unusable state directory: lock %v, ok %v; want none and go on", l, ok)
	}
}

func waitForWaiters(t *testing.T, clk *testclock.FakeClock) {
	t.Helper()
	testbed.WaitFor(t, 10*time.Second, "a wait on the fake clock", clk.HasWaiters)
}

// TestNodeLockFileReplaced: the holder file removed while its holder runs
// (rm -rf of the state directory's contents) lets no second agent in
// beside the first: the lock is on the directory.
func TestNodeLockFileReplaced(t *testing.T) {
	dir := t.TempDir()
	first, _, err := tryNodeLock(dir, "first")
	if err != nil {
		t.Fatal(err)
	}
	defer first.release()
	if err := os.Remove(filepath.Join(dir, NodeLockFileName)); err != nil {
		t.Fatal(err)
	}
	second, _, err := tryNodeLock(dir, "second")
	if !errors.Is(err, errLocked) {
		second.release()
		t.Fatalf("second take after the holder file was removed: %v; want errLocked (the first still runs)", err)
	}
}

// TestNodeLockReadOnly: an agent whose state directory is read-only still
// finds the lock another agent holds (flock needs no write access), and
// takes it when it is free.
func TestNodeLockReadOnly(t *testing.T) {
	dir := t.TempDir()
	held, _, err := tryNodeLock(dir, "writer")
	if err != nil {
		t.Fatal(err)
	}
	ro := t.TempDir()
	if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount (needs root): %v", err)
	}
	defer unix.Unmount(ro, unix.MNT_DETACH)
	if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tryNodeLock(ro, "reader"); !errors.Is(err, errLocked) {
		t.Fatalf("read-only take while held: %v, want errLocked", err)
	}
	held.release()
	l, _, err := tryNodeLock(ro, "reader")
	if err != nil {
		t.Fatalf("read-only take when free: %v", err)
	}
	l.release()
}

// TestAcquireNodeLockKeepsWaiting: an agent on standby whose retry fails
// for another reason than the lock being held (the directory turned
// read-only, no file descriptor left) goes on waiting: only the lock says
// the other agent has stopped.
func TestAcquireNodeLockKeepsWaiting(t *testing.T) {
	dir := t.TempDir()
	held, _, err := tryNodeLock(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()
	clk := testclock.NewFakeClock(time.Now())
	var standby standbyLog
	done := make(chan bool, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		l, ok := acquireNodeLock(ctx, dir, clk, standby.record)
		l.release()
		done <- ok
	}()
	waitForWaiters(t, clk)
	// The state directory's path turns into something no lock can be taken
	// on (the holder keeps its lock on the directory it opened).
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Step(nodeLockRetry)
		select {
		case ok := <-done:
			t.Fatalf("acquire returned (ok %v) on an error other than the lock being held; want it to go on waiting", ok)
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if ok := <-done; ok {
		t.Error("stopped while waiting: ok, want not")
	}
	standby.wantOnAndOff(t)
}

// TestNodeGCHolder: `nodegc plan`'s look at the lock: held (and by whom),
// free, or no state directory yet; it takes nothing and writes nothing.
func TestNodeGCHolder(t *testing.T) {
	dir := t.TempDir()
	if running, _, err := NodeGCHolder(filepath.Join(dir, "none")); running || err != nil {
		t.Errorf("no state directory: running %v, %v; want not", running, err)
	}
	if running, _, err := NodeGCHolder(dir); running || err != nil {
		t.Errorf("free: running %v, %v; want not", running, err)
	}
	held, _, err := tryNodeLock(dir, "pod nodegc/a (pid 1) since then")
	if err != nil {
		t.Fatal(err)
	}
	running, holder, err := NodeGCHolder(dir)
	if !running || holder != "pod nodegc/a (pid 1) since then" || err != nil {
		t.Errorf("held: running %v, holder %q, %v; want running by the holder", running, holder, err)
	}
	held.release()
	// The look left the lock free.
	l, _, err := tryNodeLock(dir, "b")
	if err != nil {
		t.Fatalf("take after the look: %v", err)
	}
	l.release()
}

// TestNodeLockHolderNotWritten: when the lock's new holder cannot write
// its name (a full or read-only state directory), nodegc.lock must not go
// on naming the last holder, a process that may be long gone: the old
// file is removed (or emptied), so that a second agent and `nodegc plan`
// say the holder is unknown. The lock itself holds all the same.
func TestNodeLockHolderNotWritten(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	old, _, err := tryNodeLock(dir, "pod nodegc/old-pod (pid 7) since yesterday")
	if err != nil {
		t.Fatal(err)
	}
	old.release()

	write := replaceHolder
	replaceHolder = func(string, string) error { return unix.ENOSPC }
	t.Cleanup(func() { replaceHolder = write })
	held, _, err := tryNodeLock(dir, "pod nodegc/new-pod (pid 8) since now")
	if err != nil {
		t.Fatal(err)
	}
	defer held.release()

	second, holder, err := tryNodeLock(dir, "second")
	if !errors.Is(err, errLocked) || second != nil {
		t.Fatalf("second take while the new holder holds it: %v, %v; want errLocked", second, err)
	}
	if holder != "" {
		t.Errorf("a second agent is told the holder is %q, the last holder, not the one that holds the lock; want unknown (\"\")", holder)
	}
	running, holder, err := NodeGCHolder(dir)
	if err != nil || !running || holder != "" {
		t.Errorf("NodeGCHolder = %v, %q, %v; want running, holder unknown (\"\")", running, holder, err)
	}
}
