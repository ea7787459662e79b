package containers

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/clockstep"
)

// maxSteps bounds the steps of the wall clock a timeline keeps. Each moves
// every time read before it, however old, so none is dropped for its age;
// steps are rare (a suspend counts as one), and past this many the oldest
// is dropped.
const maxSteps = 4096

// timeline reads the times the plan compares with one another and with
// now (the runtime's creation and exit times, the log directories'
// modification times) on the wall clock of now. They were read on the wall
// clock of their moment, and a step of it since (a node without a
// real-time clock set by NTP, an operator's date) would make them older or
// younger by the step: a container created seconds before a step of an
// hour forward would be an hour past its start grace, and every dead
// container past minAge. The manager's plans read the clocks (follow) and
// move each time by every step found since it was read (place).
//
// A step happens between two readings, and a time read in between may be
// from before or after it: such a time is moved, or not, whichever makes
// it later (younger, newer: kept longer). A step before the manager was
// built is not known; a created container is starting until the manager
// has seen it created for the start grace, on the monotonic clock,
// whatever its creation time (Container.SeenCreatedSince). Where ages
// count from the exit (exits), an exited container whose exit time is
// unknown (the runtime gave none, or its status could not be read) is
// dated by when the manager first saw it exited, on the monotonic clock:
// the exit was no later. What the last plan did not list, or listed not
// exited, is dated no earlier than that plan, on the monotonic clock
// (floor): a step back undone between two plans is found by neither. The
// pod list's date follows steps back in the pod source
// (APIPodSource.listDate).
//
// The manager's plans are serial (Manager.serial), and so are the
// timeline's readings and writes.
type timeline struct {
	follower clockstep.Follower
	steps    []clockstep.Step // oldest first
	// since is the time elapsed on the monotonic clock (the manager's
	// clock when it is a fake one); created is, per container listed as
	// created, since() when first seen so; exited, per exited container
	// without an exit time, when first seen exited (kept only when exits
	// is set).
	since   func() time.Duration
	exits   bool
	created map[string]time.Duration
	exited  map[string]time.Duration
	// placedAt is since() at the last placement; states, the state of
	// each container it placed (nil before the first), and sandboxes, the
	// sandboxes it placed (floor).
	placedAt  time.Duration
	states    map[string]State
	sandboxes map[string]bool
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
	klog.FromContext(ctx).Info("Warning: the wall clock was stepped; the container GC reads the runtime's times moved by the step, so that they keep their ages",
		"step", s.By.Round(time.Millisecond))
}

// read returns t, read on the wall clock at its moment, on the wall clock
// now: moved by each step found since. Where t may be from either side of
// a step, it errs toward the later time.
func (tl *timeline) read(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	t = t.Round(0)
	for _, s := range tl.steps {
		// Nothing read after the step is earlier than Before+By, and
		// nothing read before it is later than After-By.
		before := t.Before(s.Before.Add(s.By))
		maybeBefore := !t.After(s.After.Add(-s.By))
		if s.By > 0 && maybeBefore || before {
			t = t.Add(s.By)
		}
	}
	return t
}

// place moves the node's times onto the wall clock of now (read), and
// dates when each created container was first seen created
// (Container.SeenCreatedSince) and, where exits is set, when each exited
// one without an exit time was first seen exited (Container.FinishedAt):
// now less the time since on the monotonic clock.
func (tl *timeline) place(node *NodeState, now time.Time) {
	for i := range node.Containers {
		c := &node.Containers[i]
		c.CreatedAt, c.FinishedAt = tl.read(c.CreatedAt), tl.read(c.FinishedAt)
	}
	for i := range node.Sandboxes {
		node.Sandboxes[i].CreatedAt = tl.read(node.Sandboxes[i].CreatedAt)
	}
	for i := range node.LogDirs {
		node.LogDirs[i].ModTime = tl.read(node.LogDirs[i].ModTime)
	}

	elapsed := tl.since()
	firstSeen := func(seen, last map[string]time.Duration, id string) time.Time {
		at, ok := last[id]
		if !ok {
			at = elapsed
		}
		seen[id] = at
		return now.Round(0).Add(at - elapsed)
	}
	created, exited := make(map[string]time.Duration, len(tl.created)), make(map[string]time.Duration, len(tl.exited))
	for i := range node.Containers {
		switch c := &node.Containers[i]; {
		case c.State == StateCreated:
			c.SeenCreatedSince = firstSeen(created, tl.created, c.ID)
		case tl.exits && c.State == StateExited && c.FinishedAt.IsZero():
			c.FinishedAt = firstSeen(exited, tl.exited, c.ID)
		}
	}
	tl.created, tl.exited = created, exited
	tl.floor(node, now, elapsed)
}

// floor dates what the last placement did not list no earlier than it, on
// the monotonic clock: a container or sandbox it did not list was created
// after that listing began, and a container it listed not exited exited
// since. A step of the wall clock back that was undone before this plan
// read the clocks is no step to follow, but the times the runtime read
// meanwhile are early by it: a container created a minute ago would count
// as an hour older, past minAge, and older than the instance before it.
// Zero times (unknown) stay so. The first placement has nothing to go by.
func (tl *timeline) floor(node *NodeState, now time.Time, elapsed time.Duration) {
	at := now.Round(0).Add(tl.placedAt - elapsed)
	later := func(t *time.Time) {
		if !t.IsZero() && t.Before(at) {
			*t = at
		}
	}
	placed := tl.states != nil
	states := make(map[string]State, len(node.Containers))
	for i := range node.Containers {
		c := &node.Containers[i]
		was, listed := tl.states[c.ID]
		if placed && !listed {
			later(&c.CreatedAt)
		}
		if placed && (!listed || was != StateExited) {
			later(&c.FinishedAt)
		}
		states[c.ID] = c.State
	}
	sandboxes := make(map[string]bool, len(node.Sandboxes))
	for i := range node.Sandboxes {
		s := &node.Sandboxes[i]
		if placed && !tl.sandboxes[s.ID] {
			later(&s.CreatedAt)
		}
		sandboxes[s.ID] = true
	}
	tl.placedAt, tl.states, tl.sandboxes = elapsed, states, sandboxes
}
