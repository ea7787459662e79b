package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// TestLeaseFence: the fence is open for renewDeadline from when the last
// successful renewal was sent, closed once revoked, and a renewal sent
// before the revocation does not open it again.
func TestLeaseFence(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	f := newLeaseFence(clk, 10*time.Second)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	steps := []struct {
		name string
		do   func()
		now  time.Duration
		want bool
	}{
		{"never renewed", func() {}, 0, false},
		{"renewal sent now", func() { f.renewedAt(at(0)) }, 0, true},
		{"just before the deadline", func() {}, 10*time.Second - time.Nanosecond, true},
		{"at the deadline", func() {}, 10 * time.Second, false},
		{"renewal sent a second ago, answered now", func() { f.renewedAt(at(9 * time.Second)) }, 10 * time.Second, true},
		{"an older renewal answered late changes nothing", func() { f.renewedAt(at(5 * time.Second)) }, 19*time.Second - time.Nanosecond, true},
		{"expired", func() {}, 19 * time.Second, false},
		{"renewed again", func() { f.renewedAt(at(19 * time.Second)) }, 19 * time.Second, true},
		{"revoked", f.revoke, 20 * time.Second, false},
		{"a renewal sent before the revocation", func() { f.renewedAt(at(20*time.Second - time.Millisecond)) }, 20 * time.Second, false},
		{"a renewal sent after it", func() { f.renewedAt(at(21 * time.Second)) }, 21 * time.Second, true},
	}
	for _, s := range steps {
		clk.SetTime(at(s.now))
		s.do()
		if got := f.open(); got != s.want {
			t.Errorf("%s (t=%v): open = %t, want %t", s.name, s.now, got, s.want)
		}
	}
}

// TestLeaseFenceWaits: waitClosed returns when the deadline passes, or at
// once on a revocation; waitOpen when a renewal arrives; both return false
// when their context ends first.
func TestLeaseFenceWaits(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := armClock{FakeClock: clocktesting.NewFakeClock(start), armed: make(chan time.Time, 16)}
	f := newLeaseFence(clk, 10*time.Second)
	f.renewedAt(start)

	closed := make(chan bool)
	go func() { closed <- f.waitClosed(t.Context()) }()
	clk.waitArmed(t, start.Add(10*time.Second))
	clk.Step(9 * time.Second)
	f.renewedAt(clk.Now()) // the wait goes on until 19s
	clk.waitArmed(t, start.Add(19*time.Second))
	clk.Step(9 * time.Second)
	select {
	case <-closed:
		t.Fatal("waitClosed returned while the fence was open")
	default:
	}
	clk.Step(time.Second)
	if !<-closed {
		t.Error("waitClosed = false at the deadline, want true")
	}

	opened := make(chan bool)
	go func() { opened <- f.waitOpen(t.Context()) }()
	f.renewedAt(clk.Now())
	if !<-opened {
		t.Error("waitOpen = false after a renewal, want true")
	}
	go func() { closed <- f.waitClosed(t.Context()) }()
	clk.waitArmed(t, clk.Now().Add(10*time.Second))
	f.revoke()
	if !<-closed {
		t.Error("waitClosed = false after a revocation, want true")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if f.waitOpen(ctx) {
		t.Error("waitOpen with an ended context = true")
	}
	clk.Step(time.Second)
	f.renewedAt(clk.Now())
	if f.waitClosed(ctx) {
		t.Error("waitClosed with an ended context = true")
	}
}

// armClock is a fake clock that reports when each timer it arms fires, so
// that a test steps time only once the waiter it means has armed its timer
// (HasWaiters also sees a timer about to be stopped and armed again; a step
// in between makes the new one fire a step later).
type armClock struct {
	*clocktesting.FakeClock
	armed chan time.Time
}

func (c armClock) NewTimer(d time.Duration) clock.Timer {
	tm := c.FakeClock.NewTimer(d)
	select {
	case c.armed <- c.FakeClock.Now().Add(d):
	default: // more timers than the test waits for
	}
	return tm
}

// waitArmed waits for a timer firing at want; timers armed for other times
// (a wait that woke and has not yet seen the change) are skipped.
func (c armClock) waitArmed(t *testing.T, want time.Time) {
	t.Helper()
	for {
		select {
		case at := <-c.armed:
			if at.Equal(want) {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no timer armed for %v", want)
		}
	}
}

// TestFencedLock: successful writes that make this instance the holder
// open the fence from when they were sent; client-go's release closes the
// fence, waits for the collector, and is not sent when the last Get showed
// another holder.
func TestFencedLock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		holder       string // in the record the last Get returned
		updateErr    error
		release      bool
		stopErr      error
		wantOpen     bool
		wantErr      string
		wantSent     []string
		wantStopWait bool
	}{
		"renewal":                    {holder: "me", wantOpen: true, wantSent: []string{"update me"}},
		"failed renewal":             {holder: "me", updateErr: errors.New("conflict"), wantErr: "conflict", wantSent: []string{"update me"}},
		"release":                    {holder: "me", release: true, wantSent: []string{"update "}, wantStopWait: true},
		"release of another's lease": {holder: "other", release: true, wantErr: `its holder is "other"`},
		"release, collector wedged":  {holder: "me", release: true, stopErr: context.DeadlineExceeded, wantErr: "not releasing", wantStopWait: true},
	} {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start)
			fence := newLeaseFence(clk, 10*time.Second)
			fence.renewedAt(start.Add(-5 * time.Second)) // open before
			inner := &fakeLock{holder: tc.holder, err: tc.updateErr, clk: clk}
			waited := false
			l := &fencedLock{Interface: inner, fence: fence, clock: clk, beforeRelease: func(context.Context) error {
				waited = true
				if fence.open() {
					t.Error("the collector is waited for with the fence still open")
				}
				return tc.stopErr
			}}
			if _, _, err := l.Get(t.Context()); err != nil {
				t.Fatal(err)
			}
			rec := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}
			if tc.release {
				rec.HolderIdentity = ""
			}
			err := l.Update(t.Context(), rec)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Update = %v, want an error with %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantSent, inner.sent); diff != "" {
				t.Errorf("updates sent (-want +got):\n%s", diff)
			}
			if waited != tc.wantStopWait {
				t.Errorf("waited for the collector: %t, want %t", waited, tc.wantStopWait)
			}
			// The update takes a second: the fence counts from its send.
			clk.SetTime(start.Add(10*time.Second - time.Nanosecond))
			if got := fence.open(); got != tc.wantOpen {
				t.Errorf("fence open just before renewDeadline after the send = %t, want %t", got, tc.wantOpen)
			}
		})
	}
}

// TestFencedLockSeesAnotherHolder: a Get that shows another holder, or
// none (the Lease deleted or taken over by hand, then made again), closes
// the fence at once: the record says this instance no longer leads, so it
// must not write until renewDeadline runs out. One that shows this
// instance leaves it open.
func TestFencedLockSeesAnotherHolder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for holder, wantOpen := range map[string]bool{"me": true, "other": false, "": false} {
		clk := clocktesting.NewFakeClock(start)
		fence := newLeaseFence(clk, 10*time.Second)
		fence.renewedAt(start.Add(-time.Second))
		l := &fencedLock{Interface: &fakeLock{holder: holder, clk: clk}, fence: fence, clock: clk}
		if _, _, err := l.Get(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := fence.open(); got != wantOpen {
			t.Errorf("the last Get showed holder %q: fence open %t, want %t", holder, got, wantOpen)
		}
	}
}

// fakeLock is a Lease whose Get returns holder and whose Update takes a
// second and fails with err.
type fakeLock struct {
	holder string
	err    error
	clk    *clocktesting.FakeClock
	sent   []string
}

func (l *fakeLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: l.holder}, []byte(l.holder), nil
}

func (l *fakeLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.Update(ctx, ler)
}

func (l *fakeLock) Update(_ context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.sent = append(l.sent, "update "+ler.HolderIdentity)
	l.clk.Step(time.Second)
	return l.err
}

func (l *fakeLock) RecordEvent(string) {}
func (l *fakeLock) Identity() string   { return "me" }
func (l *fakeLock) Describe() string   { return "fake" }

// otherHolds is a Lease that another instance holds and renews: its Get
// always names "other", renewed just now.
type otherHolds struct{}

func (otherHolds) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	now := metav1.NewTime(time.Now())
	r := &resourcelock.LeaderElectionRecord{HolderIdentity: "other", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	return r, []byte("other" + now.String()), nil
}
func (otherHolds) Create(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (otherHolds) Update(context.Context, resourcelock.LeaderElectionRecord) error { return nil }
func (otherHolds) RecordEvent(string)                                              {}
func (otherHolds) Identity() string                                                { return "me" }
func (otherHolds) Describe() string                                                { return "fake" }

// TestStandbyShutdownKeepsQuietAboutTheLease: an instance that never held
// the owner GC lease says nothing at shutdown about no longer holding it
// (client-go calls OnStoppedLeading whether or not it led): at a rollout,
// every standby's line would look like a real loss of the lease.
func TestStandbyShutdownKeepsQuietAboutTheLease(t *testing.T) {
	logCtx, lines := logLines(t.Context())
	cfg := config.Defaulted()
	o := &ownerGC{opts: Options{Config: cfg}, identity: "me", fence: newLeaseFence(clock.RealClock{}, cfg.LeaderElection.RenewDeadline.Duration)}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	leaderelection.RunOrDie(ctx, o.electionConfig(klog.FromContext(logCtx), otherHolds{}))
	// client-go calls OnNewLeader in a goroutine of its own, which may run
	// after RunOrDie returns; OnStoppedLeading, before it does.
	logged := func(text string) []string {
		var found []string
		for _, l := range lines() {
			if strings.Contains(l, text) {
				found = append(found, l)
			}
		}
		return found
	}
	wait, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	if err := testbed.Poll(wait, 10*time.Millisecond, func(context.Context) (bool, error) {
		return len(logged("Another instance leads the owner GC")) > 0, nil
	}); err != nil {
		t.Errorf("the standby did not see the other leader; its log:\n%s", strings.Join(lines(), "\n"))
	}
	for _, l := range logged("no longer holds") {
		t.Errorf("an instance that never led logs, at shutdown: %s", l)
	}
}

// TestLeaderIdentityIsTheLastObservedHolder: client-go tells each change
// of the Lease's holder in a goroutine of its own (OnNewLeader), so after
// two quick changes the older call may run last. explain's leader hint
// (leaderIdentity) is the holder the elector last observed, whatever
// order the calls ran in. Before, it was the identity the last call to
// run passed: here this instance, so explain took itself for the leader
// while another instance held the Lease.
func TestLeaderIdentityIsTheLastObservedHolder(t *testing.T) {
	cfg := config.Defaulted()
	o := &ownerGC{opts: Options{Config: cfg}, identity: "me", fence: newLeaseFence(clock.RealClock{}, cfg.LeaderElection.RenewDeadline.Duration)}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	election := o.electionConfig(logr.Discard(), otherHolds{})
	o.runTerm(ctx, election)
	election.Callbacks.OnNewLeader("me") // an earlier change's call, run late
	if id, self := o.leaderIdentity(); id != "other" || self {
		t.Errorf("leaderIdentity = %q, %v; want other, not this instance", id, self)
	}
}
