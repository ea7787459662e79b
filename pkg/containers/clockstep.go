package containers

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/clockstep"
)

// maxSteps bounds the steps of the wall clock a timeline keeps. Each moves
// every time read before it, however old (a pod list can be days old), so
// none is dropped for its age; steps are rare.
const maxSteps = 64

// timeline reads the times the plan compares (the runtime's creation and
// exit times, the log directories' modification times, the pod list's
// date) on the wall clock of now. They were read on the wall clock of their
// moment, and a step of it since (a node without a real-time clock set by
// NTP, an operator's date) would make them older or younger by the step: a
// container created seconds before a step of an hour forward would be an
// hour past its start grace, and a pod bound after a step back would seem
// to predate the list that could not return it. The manager's plans read
// the clocks (follow) and move each time by every step found since it was
// read (place).
//
// A step happens between two readings, and a time read in between may be
// from before or after it: such a time is moved, or not, whichever errs
// toward keeping (later for the node's things, earlier for the list's
// date). A step before nodegc started is not known; a created container is
// starting until nodegc has seen it created for the start grace, on the
// monotonic clock, whatever its creation time (seen).
//
// The manager's plans are serial (Manager.serial), and so are the
// timeline's readings and writes.
type timeline struct {
	follower clockstep.Follower
	steps    []clockstep.Step // oldest first
	// since is the time elapsed on the monotonic clock (the manager's
	// clock when it is a fake one); seen is, per container listed as
	// created, since() when first seen so.
	since func() time.Duration
	seen  map[string]time.Duration
}

// follow reads the clocks at now and keeps the step found since the last
// reading, if any.
func (tl *timeline) follow(ctx context.Context, now time.Time) {
	s := tl.follower.Follow(now)
	if s.By == 0 {
		return
	}
	tl.steps = append(tl.steps, s)
	if len(tl.steps) > maxSteps {
		tl.steps = tl.steps[len(tl.steps)-maxSteps:]
	}
	klog.FromContext(ctx).Info("Warning: the wall clock was stepped; the container GC reads the runtime's times and the pod list's date moved by the step, so that they keep their ages",
		"step", s.By.Round(time.Millisecond))
}

// read returns t, read on the wall clock at its moment, on the wall clock
// now: moved by each step found since. Where t may be from either side of
// a step, later says which way to err: toward the later time (the node's
// things: younger, newer) or the earlier one (the pod list's date).
func (tl *timeline) read(t time.Time, later bool) time.Time {
	if t.IsZero() {
		return t
	}
	t = t.Round(0)
	for _, s := range tl.steps {
		// Nothing read after the step is earlier than Before+By, and
		// nothing read before it is later than After-By.
		before := t.Before(s.Before.Add(s.By))
		maybeBefore := !t.After(s.After.Add(-s.By))
		if (s.By > 0) == later && maybeBefore || before {
			t = t.Add(s.By)
		}
	}
	return t
}

// place moves the node's times and the view's date onto the wall clock of
// now (read), and dates each created container no earlier than nodegc
// first saw it created (seen), now less the time since on the monotonic
// clock.
func (tl *timeline) place(node *NodeState, view *PodView, now time.Time) {
	for i := range node.Containers {
		c := &node.Containers[i]
		c.CreatedAt, c.FinishedAt = tl.read(c.CreatedAt, true), tl.read(c.FinishedAt, true)
	}
	for i := range node.Sandboxes {
		node.Sandboxes[i].CreatedAt = tl.read(node.Sandboxes[i].CreatedAt, true)
	}
	for i := range node.LogDirs {
		node.LogDirs[i].ModTime = tl.read(node.LogDirs[i].ModTime, true)
	}
	view.ListedAt = tl.read(view.ListedAt, false)

	elapsed := tl.since()
	seen := make(map[string]time.Duration, len(tl.seen))
	for i := range node.Containers {
		c := &node.Containers[i]
		if c.State != StateCreated {
			continue
		}
		at, ok := tl.seen[c.ID]
		if !ok {
			at = elapsed
		}
		seen[c.ID] = at
		if first := now.Round(0).Add(at - elapsed); c.CreatedAt.Before(first) {
			c.CreatedAt = first
		}
	}
	tl.seen = seen
}
