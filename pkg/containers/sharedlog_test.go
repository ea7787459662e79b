package containers

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestLogFilesSharedWithAStayingInstance: the kubelet numbers a new
// instance of a container from the one newest by creation time, so after
// a step of the wall clock back every instance it makes until the clock
// catches up gets the same attempt (2 here) and the same log file,
// .../app/2.log, which the runtime opens to append. With a per-container
// limit of 1 the oldest instance (aaa...) goes, but its log files are
// those of the newest dead one (bbb..., for kubectl logs --previous) and
// the running one (ccc...): they stay, and its own link goes. Before,
// removing it removed 2.log*, and the running instance went on writing to
// an unlinked file (review containers r14 R14-1).
func TestLogFilesSharedWithAStayingInstance(t *testing.T) {
	f := newSteppedFixture(t, live(fixtureUID("p")), nil)
	uid := fixtureUID("p")
	dir := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"), "app")
	mkdirs(t, dir, f.cfg.ContainerLogsDirectory)
	logPath := filepath.Join(dir, "2.log")
	for _, p := range []string{logPath, logPath + ".20261201-000000"} {
		if err := os.WriteFile(p, []byte("the running instance's log\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.addSandbox(sbx("p", 0, true, 3*time.Hour))
	instances := []Container{
		with(dead("p", "app", 2, 30*time.Minute), func(c *Container) { c.ID = strings.Repeat("a", 64) }),
		with(dead("p", "app", 2, 20*time.Minute), func(c *Container) { c.ID = strings.Repeat("b", 64) }),
		with(ctr("p", "app", 2, StateRunning, 10*time.Minute), func(c *Container) { c.ID = strings.Repeat("c", 64) }),
	}
	var links []string
	for _, c := range instances {
		c.PodUID = uid
		f.rt.addContainer(c, logPath)
		link, ok := linkOf(f.cfg.ContainerLogsDirectory, &c)
		if !ok {
			t.Fatalf("no link name for %s", c.ID)
		}
		if err := os.Symlink(logPath, link); err != nil {
			t.Fatal(err)
		}
		links = append(links, link)
	}
	r, err := f.m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, d := range r.Outcome.Containers {
		removed = append(removed, d.Container.ID+":"+d.Reason)
		if d.LogBytes != 0 {
			t.Errorf("%s counts %d bytes of log files freed; want 0, they stay", d.Container.ID, d.LogBytes)
		}
	}
	if want := []string{instances[0].ID + ":" + ReasonPerContainerLimit}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v: the test proves nothing", removed, want)
	}
	for _, p := range []string{logPath, logPath + ".20261201-000000"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the log file the newest dead and the running instance write: %v; want it kept", err)
		}
	}
	if _, err := os.Lstat(links[0]); err == nil {
		t.Errorf("the removed instance's own link %s stays; want it removed", links[0])
	}
	for _, l := range links[1:] {
		if _, err := os.Lstat(l); err != nil {
			t.Errorf("a staying instance's link: %v; want it kept", err)
		}
	}
}

// madeOnRemoval is a runtime on which, right after the container id is
// removed, made runs: the kubelet's next instance, created in the instant
// between the removal and that of the removed one's logs.
type madeOnRemoval struct {
	*fakeRuntime
	id   string
	made func()
}

func (r *madeOnRemoval) RemoveContainer(ctx context.Context, id string) error {
	err := r.fakeRuntime.RemoveContainer(ctx, id)
	if err == nil && id == r.id {
		r.made()
	}
	return err
}

// TestLogFilesOfAnInstanceMadeMeanwhile: a created container that never
// started (a leftover) loses its logs only once the runtime removed it.
// The kubelet numbers its next instance from the newest by creation time,
// which, the leftover gone, is the instance before it: the new one gets the
// leftover's attempt, and its log file. One made in the instant between
// the two keeps the file. Before, the leftover's LOGPATH* went, and the new
// instance wrote to an unlinked file (review containers r14, R14-1's
// narrow variant).
func TestLogFilesOfAnInstanceMadeMeanwhile(t *testing.T) {
	f := newManagerFixture(t)
	uid := fixtureUID("p")
	dir := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"), "app")
	mkdirs(t, dir)
	logPath := filepath.Join(dir, "3.log")
	leftover := with(ctr("p", "app", 3, StateCreated, 3*time.Hour), func(c *Container) { c.PodUID = uid })
	f.rt.addContainer(leftover, logPath)
	rt := &madeOnRemoval{fakeRuntime: f.rt, id: leftover.ID, made: func() {
		next := with(ctr("p", "app", 3, StateCreated, 0), func(c *Container) { c.ID, c.PodUID = "p/app/3-next", uid })
		f.rt.addContainer(next, logPath)
		if err := os.WriteFile(logPath, []byte("the next instance's log\n"), 0o644); err != nil {
			t.Error(err)
		}
	}}
	m := f.manager(t, func(o *Options) { o.Runtime = rt })
	if _, err := m.Plan(t.Context()); err != nil { // first seen created now
		t.Fatal(err)
	}
	f.clock.Step(time.Hour) // past the start grace on both clocks
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Outcome.Containers, func(d ContainerDecision) bool { return d.Container.ID == leftover.ID }) {
		t.Fatalf("the leftover was not removed (removed %v): the test proves nothing", r.Outcome.Containers)
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Errorf("the log file of the instance made right after the leftover's removal: %v; want it kept", err)
	}
}
