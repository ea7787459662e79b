package containers

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/clockstep"
	"github.com/nodegc/nodegc/pkg/config"
)

// steppedFixture is a manager on a fake wall clock at t0 beside a
// monotonic clock of the test's own, which a step of the wall clock does
// not move.
type steppedFixture struct {
	*managerFixture
	m    *Manager
	tl   *Timeline // m's, for a manager built again (rebuild)
	mono time.Duration
}

func newSteppedFixture(t *testing.T, view PodView, mutate func(*config.ContainerGCConfiguration)) *steppedFixture {
	t.Helper()
	root := t.TempDir()
	f := &steppedFixture{managerFixture: &managerFixture{rt: newFakeRuntime(), clock: clocktesting.NewFakeClock(t0),
		reg: prometheus.NewPedanticRegistry(), pods: &fakePods{view: view}}}
	f.pods.renewing = f.clock
	f.cfg = config.Defaulted().ContainerGC
	f.cfg.PodLogsDirectory, f.cfg.ContainerLogsDirectory = filepath.Join(root, "pods"), filepath.Join(root, "containers")
	if mutate != nil {
		mutate(&f.cfg)
	}
	f.tl = NewTimeline()
	f.m = f.manager(t, func(o *Options) { o.Timeline = f.tl })
	monotonic := func() time.Duration { return f.mono }
	f.m.timeline.follower.Monotonic, f.m.timeline.since = monotonic, monotonic
	return f
}

// rebuild replaces the manager by a new one on the same Timeline, as the
// agent builds it again for a runtime upgraded in place.
func (f *steppedFixture) rebuild(t *testing.T) {
	t.Helper()
	f.reg = prometheus.NewPedanticRegistry() // the old manager's metrics go with it
	f.m = f.manager(t, func(o *Options) { o.Timeline = f.tl })
}

// youngAcrossAStep is a stepped fixture with minAge 1h where pod p lives
// and pod gone was deleted: p's container app exited 10m ago (attempt 1)
// and was created again 5s ago (attempt 2, not started); gone's exited
// 30m ago. want is what a plan keeps them as, now and after a step of the
// wall clock forward.
func youngAcrossAStep(t *testing.T) (f *steppedFixture, want map[string]string) {
	t.Helper()
	view := live(fixtureUID("p"))
	view.Deleted = map[string]bool{fixtureUID("gone"): true}
	f = newSteppedFixture(t, view, func(c *config.ContainerGCConfiguration) { c.MinAge = &metav1.Duration{Duration: time.Hour} })
	f.addContainer(dead("p", "app", 1, 10*time.Minute))
	f.addContainer(ctr("p", "app", 2, StateCreated, 5*time.Second))
	f.addContainer(dead("gone", "app", 0, 30*time.Minute))
	f.addSandbox(sbx("p", 0, true, time.Hour))
	f.addSandbox(sbx("gone", 0, false, time.Hour))
	return f, map[string]string{"p/app/1": KeepMinAge, "p/app/2": KeepStarting, "gone/app/0": KeepMinAge}
}

// step moves the wall clock by wall and the monotonic clock by mono.
func (f *steppedFixture) step(wall, mono time.Duration) {
	f.clock.Step(wall)
	f.mono += mono
}

// reasons plans and returns each container's decision, by ID.
func (f *steppedFixture) reasons(t *testing.T) map[string]string {
	t.Helper()
	plan, err := f.m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range slices.Concat(plan.RemoveContainers, plan.KeepContainers) {
		out[d.Container.ID] = d.Reason
	}
	return out
}

// TestForwardStepKeepsWhatIsYoung: the wall clock steps an hour forward
// (a node without a real-time clock set by NTP) between two runs. The
// runtime's times were read on the clock before it: a container created 5s
// before, never started yet, is still starting, not a leftover over the
// per-container limit (the kubelet's start of it would fail, or containerd
// would stop it once started); a dead container of a deleted pod that
// exited half an hour before is still younger than minAge (1h). Before,
// both were taken as an hour older than they are, and removed.
func TestForwardStepKeepsWhatIsYoung(t *testing.T) {
	f, want := youngAcrossAStep(t)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Fatalf("before the step: %v, want %v", got, want)
	}
	f.step(time.Hour+5*time.Second, 5*time.Second)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("5s later, the wall clock stepped an hour forward: %v, want %v", got, want)
	}
	// Past the grace and minAge on the monotonic clock, they go.
	f.step(time.Hour, time.Hour)
	want = map[string]string{"p/app/1": KeepNewestDead, "p/app/2": ReasonPerContainerLimit, "gone/app/0": ReasonPodGone}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("an hour later: %v, want %v", got, want)
	}
}

// TestCreatedIsStartingUntilSeenForTheGrace: a created container is
// starting until nodegc itself has seen it created for the start grace, on
// the monotonic clock, whatever its creation time says: a step of the wall
// clock before nodegc started (a node booting, set by NTP after the kubelet
// created it), or a runtime that gives no creation time, would otherwise
// make a container whose start is in flight a leftover. Before, the
// instance created "an hour ago" was removed at the first run.
func TestCreatedIsStartingUntilSeenForTheGrace(t *testing.T) {
	f := newSteppedFixture(t, live(fixtureUID("p")), nil)
	f.addContainer(dead("p", "app", 1, 2*time.Hour))
	f.addContainer(ctr("p", "app", 2, StateCreated, time.Hour))
	f.addContainer(with(ctr("p", "side", 1, StateCreated, 0), func(c *Container) { c.CreatedAt = time.Time{} }))
	f.addSandbox(sbx("p", 0, true, 2*time.Hour))
	want := map[string]string{"p/app/1": KeepWithinLimit, "p/app/2": KeepStarting, "p/side/1": KeepStarting}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Fatalf("first seen now: %v, want %v", got, want)
	}
	grace := StartGrace(0)
	f.step(grace-time.Second, grace-time.Second)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("seen for a second less than the grace: %v, want %v", got, want)
	}
	f.step(2*time.Second, 2*time.Second)
	want = map[string]string{"p/app/1": KeepNewestDead, "p/app/2": ReasonPerContainerLimit, "p/side/1": KeepWithinLimit}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("seen for longer than the grace: %v, want %v", got, want)
	}
}

// TestSeenDatesOnlyTheStart: when the manager first saw a created
// container decides only whether it is starting: the order of a unit's
// instances and the pod's newest time are the runtime's. A leftover created
// two hours ago, first seen at a restart, goes before the exited instances
// once seen for the grace (maxPerPodContainer 2); a pod deleted while
// nodegc was down, with a leftover, is gone.
func TestSeenDatesOnlyTheStart(t *testing.T) {
	view := live(fixtureUID("p"))
	view.ListedAt = t0.Add(-2 * time.Minute)
	f := newSteppedFixture(t, view, func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](2) })
	f.addSandbox(sbx("p", 0, true, 3*time.Hour))
	f.addContainer(ctr("p", "app", 0, StateCreated, 2*time.Hour)) // a leftover, never started
	f.addContainer(dead("p", "app", 1, 90*time.Minute))
	f.addContainer(dead("p", "app", 2, 60*time.Minute))
	f.addSandbox(sbx("gone", 0, false, 5*time.Hour))
	f.addContainer(dead("gone", "app", 0, 5*time.Hour))
	f.addContainer(ctr("gone", "side", 0, StateCreated, 4*time.Hour))
	want := map[string]string{"p/app/0": KeepStarting, "p/app/1": KeepWithinLimit, "p/app/2": KeepWithinLimit,
		"gone/app/0": ReasonPodGone, "gone/side/0": KeepStarting}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("first seen now: %v, want %v", got, want)
	}
	d := StartGrace(0) + time.Minute
	f.step(d, d)
	want = map[string]string{"p/app/0": ReasonPerContainerLimit, "p/app/1": KeepWithinLimit, "p/app/2": KeepWithinLimit,
		"gone/app/0": ReasonPodGone, "gone/side/0": ReasonPodGone}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("seen for longer than the grace: %v, want %v", got, want)
	}
}

// TestTimelineErrsLater: a time that may be from either side of a step is
// read as the later one, and one surely before it is moved by it, for
// steps either way; several steps add up, each on the clock the ones
// before it left.
func TestTimelineErrsLater(t *testing.T) {
	var mono time.Duration
	tl := timeline{follower: clockstep.Follower{Monotonic: func() time.Duration { return mono }}}
	wall := t0
	reading := func(wallStep, monoStep time.Duration) {
		wall, mono = wall.Add(wallStep), mono+monoStep
		tl.follow(t.Context(), wall)
	}
	reading(0, 0)
	reading(time.Hour+time.Minute, time.Minute) // an hour forward, between t0 and t0+1h1m
	for _, tc := range []struct {
		at, want time.Time
	}{
		{t0.Add(-time.Hour), t0}, // before the step: moved
		{t0.Add(30 * time.Second), t0.Add(time.Hour + 30*time.Second)},           // either side: the later
		{t0.Add(time.Hour + 30*time.Second), t0.Add(time.Hour + 30*time.Second)}, // after it: as read
	} {
		if got := tl.read(tc.at); !got.Equal(tc.want) {
			t.Errorf("an hour forward: %v read as %v, want %v", tc.at, got, tc.want)
		}
	}
	reading(time.Hour, time.Hour)                     // t0+2h1m
	reading(-10*time.Minute+time.Minute, time.Minute) // ten minutes back, between t0+2h1m and t0+1h52m
	for _, tc := range []struct {
		at, want time.Time
	}{
		{t0.Add(-time.Hour), t0.Add(-10 * time.Minute)},                            // before both: moved by both
		{t0.Add(90 * time.Minute), t0.Add(80 * time.Minute)},                       // between them: moved by the second
		{t0.Add(115 * time.Minute), t0.Add(115 * time.Minute)},                     // either side of the second: the later, unmoved
		{t0.Add(2*time.Hour + 5*time.Minute), t0.Add(2*time.Hour + 5*time.Minute)}, // after both
	} {
		if got := tl.read(tc.at); !got.Equal(tc.want) {
			t.Errorf("then ten minutes back: %v read as %v, want %v", tc.at, got, tc.want)
		}
	}
}

// TestUnknownExitCountsFromFirstSeen: with minAgeFrom Exited, an exited
// container the runtime gives no exit time for is dated by when the manager
// first saw it exited, on the monotonic clock: kept while younger than
// minAge by that date, then collected. Before, it was kept for good
// (min_age at every run), and a deleted pod's containers piled up.
func TestUnknownExitCountsFromFirstSeen(t *testing.T) {
	f := newSteppedFixture(t, live(), func(c *config.ContainerGCConfiguration) {
		c.MinAge = &metav1.Duration{Duration: time.Hour}
		c.MinAgeFrom = config.AgeFromExit
	})
	f.addSandbox(sbx("gone", 0, false, 5*time.Hour))
	f.addContainer(dead("gone", "app", 0, 5*time.Hour)) // no FinishedAt: the runtime gives 0
	want := map[string]string{"gone/app/0": KeepMinAge}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Fatalf("first seen: %v, want %v", got, want)
	}
	// A step of the wall clock forward does not age it.
	f.step(2*time.Hour, time.Hour-time.Second)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Fatalf("seen exited for a second less than minAge: %v, want %v", got, want)
	}
	f.step(2*time.Second, 2*time.Second)
	want = map[string]string{"gone/app/0": ReasonPodGone}
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("seen exited for longer than minAge: %v, want %v", got, want)
	}
}

// TestRebuiltManagerKeepsTheTimeline: the agent builds the container GC
// again when the runtime comes back with another profile. The wall clock
// steps an hour forward while the first manager is in place, and the next
// plan is the rebuilt manager's: given the first one's Timeline, it knows
// the step and when it first saw each container, and decides as the first
// would have (TestForwardStepKeepsWhatIsYoung). Before, every manager had
// a timeline of its own: the rebuilt one aged the dead container of a
// deleted pod by the step, past minAge, and removed it.
func TestRebuiltManagerKeepsTheTimeline(t *testing.T) {
	f, want := youngAcrossAStep(t)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Fatalf("before the step: %v, want %v", got, want)
	}
	f.step(time.Hour+5*time.Second, 5*time.Second)
	f.rebuild(t)
	if got := f.reasons(t); !maps.Equal(got, want) {
		t.Errorf("rebuilt 5s later, the wall clock stepped an hour forward meanwhile: %v, want %v", got, want)
	}
}

// TestStepKeepsTheNewestDeadInstance: a step of the wall clock between
// the creations of two instances of a live pod's container may swap their
// order as the plan reads it, and the newest dead instance stays all the
// same (kept beside the one the times say is newest). Forward: the clock
// steps 30s forward 10s after a plan; attempt 1, created 20s after it (on
// the monotonic clock), is in the part of the window the timeline cannot
// tell and is moved 30s later, attempt 2, 40s after it, is not, and reads
// older. Back: the clock steps 30s back; attempt 2, created after the
// step, has the earlier time. Before, attempt 2, the last crash with its
// logs, went by the per-container limit in both, and attempt 1 stayed:
// the kubelet, which reads the runtime's times, then removed attempt 1.
func TestStepKeepsTheNewestDeadInstance(t *testing.T) {
	for name, tc := range map[string]struct {
		created    [3]time.Duration // attempts 1-3, before the second plan's wall time
		wall, mono time.Duration    // the second plan, after the first
	}{
		"forward": {created: [3]time.Duration{50 * time.Second, 70 * time.Second, 85 * time.Second}, wall: 90 * time.Second, mono: time.Minute},
		"back":    {created: [3]time.Duration{25 * time.Second, 10 * time.Second, 20 * time.Second}, wall: 30 * time.Second, mono: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			f := newSteppedFixture(t, live(fixtureUID("p")), nil)
			f.addSandbox(sbx("p", 0, true, time.Hour))
			f.reasons(t) // the first plan, at t0: the clocks are read
			f.addContainer(dead("p", "app", 1, -tc.created[0]))
			f.addContainer(dead("p", "app", 2, -tc.created[1]))
			f.addContainer(ctr("p", "app", 3, StateRunning, -tc.created[2]))
			f.step(tc.wall, tc.mono)
			got := f.reasons(t)
			if got["p/app/2"] != KeepNewestDead || got["p/app/1"] == "" || got["p/app/3"] != KeepRunning {
				t.Errorf("decisions %v; want attempt 2, the newest dead instance, kept as %s (attempt 1 kept or removed)", got, KeepNewestDead)
			}
			// The kubelet removes attempt 1 by its own limit: attempt 2
			// is then the newest by both orders, and nothing else goes.
			if err := f.rt.RemoveContainer(t.Context(), "p/app/1"); err != nil {
				t.Fatal(err)
			}
			if got := f.reasons(t); got["p/app/2"] != KeepWithinLimit {
				t.Errorf("attempt 1 gone: decisions %v; want attempt 2 %s", got, KeepWithinLimit)
			}
		})
	}
}

// TestStepBackAndForthBetweenRuns: the wall clock steps an hour back and,
// before the next run, an hour forward again (a mistyped date corrected; a
// time daemon following a bad source, then a good one). The plans read the
// clocks at their start, and find no step; a container created and exited
// in between carries times an hour early. A container the last plan did
// not list was created after it, on the monotonic clock: app/1, made a
// minute ago, stays under minAge (30m). Before, it counted as an hour older, past minAge and older than app/0,
// and the per-container limit removed it a minute after it was made
// (review containers r14 R14-2).
func TestStepBackAndForthBetweenRuns(t *testing.T) {
	f := newSteppedFixture(t, live(fixtureUID("p")), func(c *config.ContainerGCConfiguration) {
		c.MinAge = &metav1.Duration{Duration: 30 * time.Minute}
	})
	f.addSandbox(sbx("p", 0, true, 3*time.Hour))
	f.addContainer(dead("p", "app", 0, 40*time.Minute))
	if got := f.reasons(t); got["p/app/0"] != KeepWithinLimit {
		t.Fatalf("first run: %v, want p/app/0 %s", got, KeepWithinLimit)
	}
	// A minute later the clock steps an hour back; app/1 is created and
	// exits then (dated t0-59m, made at t0+1m).
	f.step(-time.Hour+time.Minute, time.Minute)
	f.addContainer(dead("p", "app", 1, 59*time.Minute))
	// A minute later the clock steps forward again; app/2 is created and
	// exits (dated t0+2m, made at t0+2m).
	f.step(time.Hour+time.Minute, time.Minute)
	f.addContainer(dead("p", "app", 2, -2*time.Minute))
	got := f.reasons(t)
	if got["p/app/1"] != KeepMinAge {
		t.Errorf("app/1, created a minute ago (minAge 30m): %s, want %s; all: %v", got["p/app/1"], KeepMinAge, got)
	}
}
