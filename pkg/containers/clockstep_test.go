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

	"github.com/nodegc/nodegc/pkg/config"
)

// steppedFixture is a manager on a fake wall clock at t0 beside a
// monotonic clock of the test's own, which a step of the wall clock does
// not move.
type steppedFixture struct {
	*managerFixture
	m    *Manager
	mono time.Duration
}

func newSteppedFixture(t *testing.T, view PodView, minAge time.Duration) *steppedFixture {
	t.Helper()
	root := t.TempDir()
	f := &steppedFixture{managerFixture: &managerFixture{rt: newFakeRuntime(), clock: clocktesting.NewFakeClock(t0),
		reg: prometheus.NewPedanticRegistry(), pods: &fakePods{view: view}}}
	f.cfg = config.Defaulted().ContainerGC
	f.cfg.PodLogsDirectory, f.cfg.ContainerLogsDirectory = filepath.Join(root, "pods"), filepath.Join(root, "containers")
	f.cfg.MinAge = &metav1.Duration{Duration: minAge}
	f.m = f.manager(t, nil)
	monotonic := func() time.Duration { return f.mono }
	f.m.timeline.follower.Monotonic, f.m.timeline.since = monotonic, monotonic
	return f
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
	f := newSteppedFixture(t, live(fixtureUID("p")), time.Hour)
	f.addContainer(dead("p", "app", 1, 10*time.Minute))
	f.addContainer(ctr("p", "app", 2, StateCreated, 5*time.Second))
	f.addContainer(dead("gone", "app", 0, 30*time.Minute))
	f.addSandbox(sbx("p", 0, true, time.Hour))
	f.addSandbox(sbx("gone", 0, false, time.Hour))
	want := map[string]string{"p/app/1": KeepMinAge, "p/app/2": KeepStarting, "gone/app/0": KeepMinAge}
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
	f := newSteppedFixture(t, live(fixtureUID("p")), 0)
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

// TestBackwardStepKeepsPodsListedAfterIt: the wall clock steps 10 minutes
// back after the pod list (NTP correcting a clock that ran fast), and the
// watch stalls. A pod bound after the step, which the list could not
// return, has things on the node dated before the list's time as the
// clock read it: it is not gone. Before, its container, sandbox and log
// directory were removed while the pod existed.
func TestBackwardStepKeepsPodsListedAfterIt(t *testing.T) {
	view := live(fixtureUID("p"))
	view.ListedAt = t0.Add(-listSkew) // listed at t0
	f := newSteppedFixture(t, view, 0)
	f.addContainer(dead("p", "app", 1, time.Hour))
	f.addSandbox(sbx("p", 0, true, time.Hour))
	if got := f.reasons(t); got["p/app/1"] != KeepWithinLimit {
		t.Fatalf("before the step: %v", got)
	}
	f.step(-10*time.Minute+time.Minute, time.Minute) // now t0-9m
	// Pod "job" was created after the step and has finished: on the
	// clock as stepped, its things are from t0-9m30s and t0-9m20s.
	f.addContainer(with(ctr("job", "run", 0, StateExited, 9*time.Minute+20*time.Second), func(c *Container) {
		c.CreatedAt = t0.Add(-9*time.Minute - 30*time.Second)
		c.FinishedAt = t0.Add(-9*time.Minute - 20*time.Second)
	}))
	f.addSandbox(sbx("job", 0, false, 9*time.Minute+30*time.Second))
	got := f.reasons(t)
	if got["job/run/0"] != KeepWithinLimit {
		t.Errorf("the container of a pod created after the step: %q, want %q (its pod is not known gone)", got["job/run/0"], KeepWithinLimit)
	}
}
