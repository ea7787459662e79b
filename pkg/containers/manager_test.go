package containers

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

type managerFixture struct {
	rt    *fakeRuntime
	pods  *fakePods
	clock *clocktesting.FakeClock
	reg   *prometheus.Registry
	cfg   config.ContainerGCConfiguration
}

// newManagerFixture: pod "p" (live) restarted 3 times in a ready sandbox,
// pod "gone" with one dead container in a stopped sandbox and a log
// directory.
func newManagerFixture(t *testing.T) *managerFixture {
	t.Helper()
	root := t.TempDir()
	f := &managerFixture{rt: newFakeRuntime(), clock: clocktesting.NewFakeClock(t0), reg: prometheus.NewPedanticRegistry(),
		pods: &fakePods{view: live(fixtureUID("p"))}}
	f.pods.renewing = f.clock
	f.cfg = config.Defaulted().ContainerGC
	f.cfg.PodLogsDirectory, f.cfg.ContainerLogsDirectory = filepath.Join(root, "pods"), filepath.Join(root, "containers")
	for _, c := range append(restarts("p", "app", 3), dead("gone", "app", 0, 5*time.Hour)) {
		f.addContainer(c)
	}
	f.addSandbox(sbx("p", 0, true, 5*time.Hour))
	f.addSandbox(sbx("gone", 0, false, 5*time.Hour))
	for _, pod := range []string{"gone", "p"} {
		p := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir(pod))
		mkdirs(t, p)
		if err := os.Chtimes(p, t0.Add(-5*time.Hour), t0.Add(-5*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// fixtureUID is the UID of the fixture's pod: a UUID, as the API server
// makes, so that the pod's log directory is one.
func fixtureUID(pod string) string {
	h := md5.Sum([]byte(pod))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// fixtureLogDir is the name of the log directory of the fixture's pod.
func fixtureLogDir(pod string) string { return "ns_" + pod + "_" + fixtureUID(pod) }

// addContainer adds c, of the fixture's pod c.PodName, to the runtime.
func (f *managerFixture) addContainer(c Container) {
	c.PodUID = fixtureUID(c.PodName)
	f.rt.addContainer(c, "")
}

// listLater moves the clock by d, and the pod view's list to then.
func (f *managerFixture) listLater(d time.Duration) {
	f.clock.Step(d)
	f.pods.mu.Lock()
	f.pods.view.ListedAt = f.clock.Now()
	f.pods.mu.Unlock()
}

// addSandbox adds s, of the fixture's pod s.PodName, to the runtime.
func (f *managerFixture) addSandbox(s Sandbox) {
	s.PodUID = fixtureUID(s.PodName)
	f.rt.addSandbox(s)
}

func (f *managerFixture) manager(t *testing.T, mutate func(*Options)) *Manager {
	t.Helper()
	opts := Options{Config: f.cfg, Runtime: f.rt, Pods: f.pods, Clock: f.clock, Registerer: f.reg}
	if mutate != nil {
		mutate(&opts)
	}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runsTotal reads nodegc_container_gc_runs_total{trigger,result} from reg.
func runsTotal(t *testing.T, reg prometheus.Gatherer, trigger, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := testbed.MetricSum(families, "nodegc_container_gc_runs_total", "trigger="+trigger, "result="+result)
	return n
}

func planIDs(p *Plan) []string {
	var ids []string
	for _, d := range p.RemoveContainers {
		ids = append(ids, d.Container.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveSandboxes {
		ids = append(ids, d.Sandbox.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveLogDirs {
		ids = append(ids, d.Dir.Name+":"+d.Reason)
	}
	return ids
}

func TestGarbageCollectRemovesAndCounts(t *testing.T) {
	f := newManagerFixture(t)
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"gone/app/0:pod_gone", "p/app/0:per_container_limit", "p/app/1:per_container_limit", "gone/sb0:pod_gone", fixtureLogDir("gone") + ":pod_gone"}
	if diff := cmp.Diff(want, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"p/app/2": true}, f.rt.containerIDs()); diff != "" {
		t.Errorf("containers left (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{fixtureUID("gone"): true, fixtureUID("p"): true}, f.pods.retained); diff != "" {
		t.Errorf("pods on the node passed to Retain (-want +got):\n%s", diff)
	}
	for reason, want := range map[string]float64{ReasonPodGone: 1, ReasonPerContainerLimit: 2, ReasonNodeLimit: 0} {
		if got := testutil.ToFloat64(m.metrics.containersRemoved.WithLabelValues(reason)); got != want {
			t.Errorf("containers removed{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.metrics.sandboxesRemoved.WithLabelValues(ReasonPodGone)); got != 1 {
		t.Errorf("sandboxes removed{pod_gone} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.logDirsRemoved.WithLabelValues(ReasonPodGone)); got != 1 {
		t.Errorf("log directories removed{pod_gone} = %v, want 1", got)
	}
	if got := runsTotal(t, f.reg, TriggerManual, resultSuccess); got != 1 {
		t.Errorf("runs{manual,success} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 1 {
		t.Errorf("pod view authoritative = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(f.reg); err != nil || n == 0 {
		t.Errorf("GatherAndCount = %d, %v", n, err)
	}
}

// TestGarbageCollectDryRunReportsTheSamePlan: a dry run removes nothing and
// reports exactly the plan a real run then carries out.
func TestGarbageCollectDryRunReportsTheSamePlan(t *testing.T) {
	f := newManagerFixture(t)
	dryReg := prometheus.NewRegistry()
	dry := f.manager(t, func(o *Options) {
		o.Config.DryRun = true
		o.Registerer = dryReg
	})
	dr, err := dry.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range f.rt.callLog() {
		// Listing, asking the runtime's version, and reading the planned
		// containers' log paths to count their bytes.
		if !strings.HasPrefix(call, "List") && call != "Version " && !strings.HasPrefix(call, "ContainerStatus ") {
			t.Errorf("dry run made runtime calls beyond reading: %v", f.rt.callLog())
			break
		}
	}
	if len(f.rt.containerIDs()) != 4 || len(f.rt.sandboxIDSet()) != 2 || !exists(filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("gone"))) {
		t.Fatal("dry run removed something")
	}
	if got := runsTotal(t, dryReg, TriggerManual, resultDryRun); got != 1 {
		t.Errorf("runs{manual,dry_run} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(dry.metrics.containersRemoved.WithLabelValues(ReasonPerContainerLimit)); got != 0 {
		t.Errorf("a dry run counted %v removals", got)
	}
	real := f.manager(t, nil)
	rr, err := real.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(dr.Plan, rr.Plan); diff != "" {
		t.Errorf("dry-run plan differs from the real one (-dry +real):\n%s", diff)
	}
	if diff := cmp.Diff(removedIDs(dr.Outcome), removedIDs(rr.Outcome)); diff != "" {
		t.Errorf("dry-run outcome differs from the real one (-dry +real):\n%s", diff)
	}
}

// TestNodeOnlyNeverRemovesForPodGone: without a pod source nothing goes
// because its pod is gone; limits still apply.
func TestNodeOnlyNeverRemovesForPodGone(t *testing.T) {
	f := newManagerFixture(t)
	m := f.manager(t, func(o *Options) { o.Pods = nil })
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p/app/0:per_container_limit", "p/app/1:per_container_limit"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if r.Plan.PodsAuthoritative || r.Plan.PodsReason != ViewNodeOnly {
		t.Errorf("plan pod view = %v/%q, want not authoritative, %q", r.Plan.PodsAuthoritative, r.Plan.PodsReason, ViewNodeOnly)
	}
}

// TestMinAgeFromExitReadsExitTimes: with minAgeFrom Exited the manager
// reads each dead container's exit time from the runtime.
func TestMinAgeFromExitReadsExitTimes(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	f.addContainer(with(dead("p", "app", 0, 6*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-3 * time.Hour) }))
	f.addContainer(with(dead("p", "app", 1, 5*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-2 * time.Hour) }))
	f.addContainer(with(dead("p", "app", 2, 4*time.Hour), func(c *Container) { c.FinishedAt = t0.Add(-time.Minute) }))
	m := f.manager(t, func(o *Options) {
		o.Config.MinAge = &metav1.Duration{Duration: time.Hour}
		o.Config.MinAgeFrom = config.AgeFromExit
		o.Config.MaxPerPodContainer = ptr.To[int32](1)
	})
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	// app/2 exited a minute ago (min age), app/0 and app/1 are old enough
	// by their exit times: the newer of them stays within the limit.
	if diff := cmp.Diff([]string{"p/app/0:per_container_limit", fixtureLogDir("gone") + ":pod_gone"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

// TestRunCollectsEveryPeriod: Run collects at once, then every period of
// the injected clock.
func TestRunCollectsEveryPeriod(t *testing.T) {
	f := newManagerFixture(t)
	reports := make(chan *Report, 4)
	m := f.manager(t, func(o *Options) { o.OnRun = func(r *Report) { reports <- r } })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	next := func() *Report { return nextReport(t, reports) }
	if r := next(); r.Trigger != TriggerPeriodic || r.Plan.Empty() {
		t.Fatalf("first run: trigger %q, plan %v", r.Trigger, planIDs(r.Plan))
	}
	f.clock.Step(f.cfg.Period.Duration)
	if r := next(); !r.Plan.Empty() {
		t.Errorf("second run planned %v, want nothing left to do", planIDs(r.Plan))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestNeverTwoRunsAtOnce: a run while another is going on is refused.
func TestNeverTwoRunsAtOnce(t *testing.T) {
	f := newManagerFixture(t)
	f.rt.listing, f.rt.release = make(chan struct{}), make(chan struct{})
	m := f.manager(t, nil)
	first := make(chan error)
	go func() {
		_, err := m.GarbageCollect(t.Context(), TriggerManual)
		first <- err
	}()
	<-f.rt.listing // the first run is listing
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); !errors.Is(err, ErrRunInProgress) {
		t.Errorf("second GarbageCollect = %v, want ErrRunInProgress", err)
	}
	if _, err := m.Plan(t.Context()); !errors.Is(err, ErrRunInProgress) {
		t.Errorf("Plan during a run = %v, want ErrRunInProgress", err)
	}
	close(f.rt.release)
	if err := <-first; err != nil {
		t.Errorf("first run: %v", err)
	}
}

func TestListFailureFailsTheRun(t *testing.T) {
	f := newManagerFixture(t)
	f.rt.fail["ListPodSandboxes "] = errors.New("runtime down")
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err == nil || !strings.Contains(err.Error(), "runtime down") || r.Plan != nil {
		t.Fatalf("GarbageCollect = %v, plan %v; want the list error and no plan", err, r.Plan)
	}
	if len(f.rt.containerIDs()) != 4 {
		t.Error("a run that could not list removed something")
	}
	if got := runsTotal(t, f.reg, TriggerManual, resultError); got != 1 {
		t.Errorf("runs{manual,error} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.metrics.errors.WithLabelValues(OpListRuntime)); got != 1 {
		t.Errorf("errors{list_runtime} = %v, want 1", got)
	}
}

// TestRetainDespiteLinkScanFailure: a container logs directory that cannot
// be read (here a file in its place; on a node, EIO or an SELinux denial)
// fails every run, but links say nothing of which pods have anything on the
// node (podsOnNode reads containers, sandboxes and pod log directories), so
// the source still forgets deletions: otherwise its deleted set would grow
// for the agent's life while the scan fails.
func TestRetainDespiteLinkScanFailure(t *testing.T) {
	f := newManagerFixture(t)
	touch(t, f.cfg.ContainerLogsDirectory) // not a directory
	m := f.manager(t, nil)
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil || !strings.Contains(err.Error(), "container logs directory") {
		t.Fatalf("GarbageCollect = %v, want the link scan's error", err)
	}
	if diff := cmp.Diff(map[string]bool{fixtureUID("gone"): true, fixtureUID("p"): true}, f.pods.retained); diff != "" {
		t.Errorf("pods on the node passed to Retain (-want +got):\n%s", diff)
	}
}

// TestNoRetainWhenPodLogDirsUnread: a pod logs directory that cannot be
// read leaves Retain uncalled: a pod that has only its log directory left
// would otherwise have its deletion forgotten.
func TestNoRetainWhenPodLogDirsUnread(t *testing.T) {
	f := newManagerFixture(t)
	if err := os.RemoveAll(f.cfg.PodLogsDirectory); err != nil {
		t.Fatal(err)
	}
	touch(t, f.cfg.PodLogsDirectory) // not a directory
	m := f.manager(t, nil)
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil || !strings.Contains(err.Error(), "pod logs directory") {
		t.Fatalf("GarbageCollect = %v, want the pod log directory scan's error", err)
	}
	if f.pods.retained != nil {
		t.Errorf("Retain(%v) was called without the pod log directories", f.pods.retained)
	}
}

// TestUnseenPodLogsKeepLogsAndWhatWouldLeaveThem: nodegc's view of the pod
// logs directory is not the kubelet's (a disk mounted on the host at
// /var/log/pods after nodegc's container started: its hostPath mount,
// without propagation, shows the directory below). The log of running
// container p/app/3, which the runtime reports under that directory, is
// missing from it, as every log there is. Then no link can be told to
// dangle, no log file can be removed, and a live pod's container a limit
// would remove would leave its logs behind until its pod is deleted. The
// run keeps every link (the newest dead instance's too), every pod log
// directory and the containers of live pods (kept as logs_unseen),
// removes what is of gone pods (the kubelet removes their log
// directories), and says so, also in nodegc_container_gc_pod_logs_unseen
// (1 while it lasts, 0 before the first run and after). Once the running
// containers' logs are seen again, the GC goes on as before.
func TestUnseenPodLogsKeepLogsAndWhatWouldLeaveThem(t *testing.T) {
	f := newManagerFixture(t)
	logDir := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"), "app")
	// The runtime's IDs are hex: the kubelet's link names end with them.
	f.rt.mu.Lock()
	for oldID, newID := range map[string]string{"p/app/0": "aaaaaaaaaaaa0", "p/app/1": "aaaaaaaaaaaa1", "p/app/2": "aaaaaaaaaaaa2"} {
		f.rt.containers[newID], f.rt.sandboxIDs[newID] = f.rt.containers[oldID], f.rt.sandboxIDs[oldID]
		f.rt.containers[newID].Id = newID
		delete(f.rt.containers, oldID)
		delete(f.rt.sandboxIDs, oldID)
	}
	f.rt.mu.Unlock()
	run := with(ctr("p", "app", 3, StateRunning, 30*time.Minute), func(c *Container) { c.ID, c.PodUID = "aaaaaaaaaaaa3", fixtureUID("p") })
	f.rt.addContainer(run, filepath.Join(logDir, "3.log"))
	mkdirs(t, f.cfg.ContainerLogsDirectory)
	links := map[string]string{}
	for attempt, id := range []string{"aaaaaaaaaaaa0", "aaaaaaaaaaaa1", "aaaaaaaaaaaa2", "aaaaaaaaaaaa3"} {
		links[id] = filepath.Join(f.cfg.ContainerLogsDirectory, legacyLinkName("p", "ns", "app", id))
		if err := os.Symlink(filepath.Join(logDir, fmt.Sprint(attempt)+".log"), links[id]); err != nil {
			t.Fatal(err)
		}
	}

	m := f.manager(t, nil)
	if got := testutil.ToFloat64(m.metrics.podLogsUnseen); got != 0 {
		t.Errorf("pod logs unseen = %v before any run, want 0", got)
	}
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Plan.PodLogsUnseen {
		t.Error("the plan does not say that the pod logs are unseen")
	}
	// Before, nothing but one log line said so.
	if got := testutil.ToFloat64(m.metrics.podLogsUnseen); got != 1 {
		t.Errorf("pod logs unseen = %v, want 1", got)
	}
	for id, link := range links {
		if _, err := os.Lstat(link); err != nil {
			t.Errorf("the link of %s went (%v), though nodegc sees no log the runtime reports under %s, not even the running container's", id, err, f.cfg.PodLogsDirectory)
		}
	}
	if diff := cmp.Diff([]string{"gone/app/0:pod_gone", "gone/sb0:pod_gone"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if !exists(filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("gone"))) {
		t.Error("the gone pod's log directory went, which nodegc cannot tell is the kubelet's")
	}
	if got := testutil.ToFloat64(m.metrics.containersKept.WithLabelValues(KeepLogsUnseen)); got != 2 {
		t.Errorf("containers kept{%s} = %v, want 2 (p's instances 0 and 1, which the per-container limit removes)", KeepLogsUnseen, got)
	}
	for _, d := range r.Plan.KeepLogLinks {
		if d.Reason != KeepLogsUnseen {
			t.Errorf("link %s kept as %s, want %s", d.Link.Name, d.Reason, KeepLogsUnseen)
		}
	}

	// The running container's log is seen: the GC goes on as before.
	touch(t, filepath.Join(logDir, "3.log"))
	r, err = m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if r.Plan.PodLogsUnseen {
		t.Error("the plan says the pod logs are unseen once the running container's log is seen")
	}
	if diff := cmp.Diff([]string{"aaaaaaaaaaaa0:per_container_limit", "aaaaaaaaaaaa1:per_container_limit", fixtureLogDir("gone") + ":pod_gone"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan once the logs are seen (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.metrics.containersKept.WithLabelValues(KeepLogsUnseen)); got != 0 {
		t.Errorf("containers kept{%s} = %v once the logs are seen, want 0", KeepLogsUnseen, got)
	}
	if got := testutil.ToFloat64(m.metrics.podLogsUnseen); got != 0 {
		t.Errorf("pod logs unseen = %v once the logs are seen, want 0", got)
	}
}

// TestViewThatDisagreesIsNotAuthoritative: a pod view that lacks a pod
// whose sandbox is ready (a wrong node name) removes nothing as pod_gone,
// and the pod view metric says so; the plan names the missing pod.
func TestViewThatDisagreesIsNotAuthoritative(t *testing.T) {
	f := newManagerFixture(t)
	f.pods.view = with(live(), func(v *PodView) { v.Node = "wrong" })
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p/app/0:per_container_limit", "p/app/1:per_container_limit"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if r.Plan.PodsReason != ViewDisagrees || r.Plan.PodsNode != "wrong" ||
		!cmp.Equal(r.Plan.PodsMissing, []PodRef{{UID: fixtureUID("p"), Namespace: "ns", Name: "p"}}) {
		t.Errorf("plan pod view: reason %q, node %q, missing %v; want %q, wrong, [p]", r.Plan.PodsReason, r.Plan.PodsNode, r.Plan.PodsMissing, ViewDisagrees)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("pod view authoritative = %v, want 0", got)
	}
}

// TestViewTheRuntimeLacksIsNotAuthoritative: a runtime that lists none of
// the pods the kubelet reports running (nodegc asks another runtime than
// the kubelet's) removes nothing, the log directory of a pod the watch saw
// deleted included; the plan names those pods and the pod view metric is
// 0, and stays 0 while the runtime cannot be listed.
func TestViewTheRuntimeLacksIsNotAuthoritative(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime() // another runtime: none of the kubelet's sandboxes
	web := fixtureUID("web")
	f.pods.view = with(live(fixtureUID("p"), web), func(v *PodView) {
		v.Deleted = map[string]bool{fixtureUID("gone"): true}
		v.Running = map[string]RunningPod{web: {PodRef: PodRef{UID: web, Namespace: "ns", Name: "web"}, Since: t0.Add(-3 * time.Hour)}}
	})
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if ids := planIDs(r.Plan); len(ids) > 0 {
		t.Errorf("plan removes %v, want nothing", ids)
	}
	if r.Plan.PodsReason != ViewRuntimeLacksPods || !cmp.Equal(r.Plan.PodsNotInRuntime, []PodRef{{UID: web, Namespace: "ns", Name: "web"}}) {
		t.Errorf("plan pod view: reason %q, not in runtime %v; want %q, [web]", r.Plan.PodsReason, r.Plan.PodsNotInRuntime, ViewRuntimeLacksPods)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("pod view authoritative = %v, want 0", got)
	}
	f.rt.fail["ListContainers "] = errors.New("unavailable")
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil {
		t.Fatal("a run whose runtime listing failed succeeded")
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("pod view authoritative = %v while the runtime cannot be listed after it lacked the view's pods, want 0", got)
	}
}

// TestViewOfAnotherRuntimeIsNotAuthoritative: a Node whose kubelet reports
// another runtime than the one the manager lists (what the runtime answers
// to Version) removes nothing as pod_gone, the log directory of a pod the
// watch saw deleted included; the plan names both runtimes. Once the
// runtime answers what the Node reports, asked again at each run (no
// reconnect), it goes.
func TestViewOfAnotherRuntimeIsNotAuthoritative(t *testing.T) {
	f := newManagerFixture(t)
	f.rt.version = &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v1.7.24"}
	f.pods.view = with(live(fixtureUID("p")), func(v *PodView) {
		v.Deleted = map[string]bool{fixtureUID("gone"): true}
		v.NodeRuntime = "containerd://1.7.23-k3s2"
	})
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"p/app/0:per_container_limit", "p/app/1:per_container_limit"}, planIDs(r.Plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if r.Plan.PodsReason != ViewNodeOtherRuntime || r.Plan.NodeRuntime != "containerd://1.7.23-k3s2" || r.Plan.Runtime != "containerd://1.7.24" {
		t.Errorf("plan pod view: reason %q, Node's runtime %q, listed %q; want %q, containerd://1.7.23-k3s2, containerd://1.7.24",
			r.Plan.PodsReason, r.Plan.NodeRuntime, r.Plan.Runtime, ViewNodeOtherRuntime)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("pod view authoritative = %v, want 0", got)
	}
	// The runtime behind the same connection now answers the version the
	// Node reports (cri-dockerd answers with dockerd's, which an upgrade
	// changes without a reconnect): asked at each run, it agrees.
	f.rt.mu.Lock()
	f.rt.version = &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "v1.7.23-k3s2"}
	f.rt.mu.Unlock()
	if r, err = m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if !r.Plan.PodsAuthoritative || !slices.Contains(planIDs(r.Plan), fixtureLogDir("gone")+":pod_gone") {
		t.Errorf("the runtime answers the version the Node reports: authoritative %v (%s), plan %v; want the gone pod's log directory removed",
			r.Plan.PodsAuthoritative, r.Plan.PodsReason, planIDs(r.Plan))
	}
	// A runtime that cannot say its version is not checked: counted, and
	// the run goes on.
	f.rt.mu.Lock()
	f.rt.fail["Version "] = errors.New("unavailable")
	f.rt.mu.Unlock()
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.errors.WithLabelValues(OpReadVersion)); got != 1 {
		t.Errorf("errors{%s} = %v, want 1", OpReadVersion, got)
	}
}

// TestManagerReportsItsRuntimeChecks: a manager with a pod source says at
// its making that it checks the views against the runtime, and reports
// what each plan of an authoritative view found: "" when they agree, the
// reason when the runtime contradicts the view. A plan of a view that is
// not authoritative checked nothing and reports nothing.
func TestManagerReportsItsRuntimeChecks(t *testing.T) {
	f := newManagerFixture(t)
	f.pods.view = live(fixtureUID("p"))
	m := f.manager(t, nil)
	if f.pods.expected != 1 {
		t.Fatalf("ExpectRuntimeChecks called %d times by NewManager, want 1", f.pods.expected)
	}
	collect := func() {
		t.Helper()
		if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
			t.Fatal(err)
		}
	}
	collect()
	f.pods.view = with(live(fixtureUID("p")), func(v *PodView) { v.Node = "wrong" }) // lacks pods the runtime runs: see TestViewThatDisagreesIsNotAuthoritative
	f.pods.view.Live = map[string]bool{}
	collect()
	f.pods.view = PodView{Reason: ViewUnreachable}
	collect()
	if _, err := m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.pods.view = live(fixtureUID("p"))
	if _, err := m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"", ViewDisagrees, ""}, f.pods.verdicts); diff != "" {
		t.Errorf("checks reported (-want +got):\n%s", diff)
	}
}

// TestNewManagerRejectsBadConfig: NewManager validates its configuration as
// the agent does (config.ValidateContainerGC); NewPolicy trusts it.
func TestNewManagerRejectsBadConfig(t *testing.T) {
	cases := map[string]func(*config.ContainerGCConfiguration){
		"unset limits":     func(c *config.ContainerGCConfiguration) { c.MaxContainers = nil },
		"negative min age": func(c *config.ContainerGCConfiguration) { c.MinAge = &metav1.Duration{Duration: -time.Second} },
		"max age below min age": func(c *config.ContainerGCConfiguration) {
			c.MinAge, c.MaxAge = &metav1.Duration{Duration: time.Hour}, &metav1.Duration{Duration: time.Minute}
		},
		"unknown age reference": func(c *config.ContainerGCConfiguration) { c.MinAgeFrom = "Started" },
		// The newest dead container of a live pod's container stays.
		"zero dead containers per pod container": func(c *config.ContainerGCConfiguration) { c.MaxPerPodContainer = ptr.To[int32](0) },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			f := newManagerFixture(t)
			mutate(&f.cfg)
			if _, err := NewManager(Options{Config: f.cfg, Runtime: f.rt}); err == nil {
				t.Error("NewManager accepted it")
			}
		})
	}
}

// steps is an ordered record of calls from several fakes.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, step)
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// stepDisk is fixedDisk that records each read.
type stepDisk struct {
	fixedDisk
	steps *steps
}

func (d stepDisk) Stat(path string) (diskstats.Stats, error) {
	d.steps.add("stat")
	return d.fixedDisk.Stat(path)
}

// stepReclaimer records each Reclaim with the containers the runtime still
// has at that moment, and fails with err.
type stepReclaimer struct {
	steps *steps
	rt    *fakeRuntime
	err   error
}

func (r stepReclaimer) Reclaim(context.Context) error {
	r.steps.add(fmt.Sprintf("reclaim with %d containers, %d sandboxes left", len(r.rt.containerIDs()), len(r.rt.sandboxIDSet())))
	return r.err
}

// TestReclaimAfterRemovalsBeforeMeasuring: a run that removed containers
// or sandboxes asks the runtime to free their writable layers once, after
// the last removal and before the filesystems are read again; a dry run, a
// run that removes nothing and a run that removes only log directories do
// not ask. A failed Reclaim is counted and logged, and the run succeeds.
func TestReclaimAfterRemovalsBeforeMeasuring(t *testing.T) {
	for name, tc := range map[string]struct {
		dryRun, empty bool
		err           error
		want          []string
	}{
		// The fake runtime reports no writable-layer mountpoint: the pod
		// logs' filesystem is read before planning, and once or more
		// after (settling), compacted to one "stat" here.
		"removals":           {want: []string{"stat", "reclaim with 1 containers, 1 sandboxes left", "stat"}},
		"reclaim fails":      {err: errors.New("containerd unreachable"), want: []string{"stat", "reclaim with 1 containers, 1 sandboxes left", "stat"}},
		"dry run":            {dryRun: true, want: []string{"stat"}},
		"log directory only": {empty: true, want: []string{"stat"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := newManagerFixture(t)
			if tc.empty {
				f.rt = newFakeRuntime() // only the gone pod's log directory is left to remove
			}
			s := &steps{}
			m := f.manager(t, func(o *Options) {
				o.Config.DryRun = tc.dryRun
				o.Disk = stepDisk{fixedDisk{available: 1 << 30}, s}
				o.Reclaimer = stepReclaimer{s, f.rt, tc.err}
				o.SettleTimeout = time.Millisecond
			})
			r, err := m.GarbageCollect(t.Context(), TriggerManual)
			if err != nil {
				t.Fatalf("run failed: %v", err)
			}
			if diff := cmp.Diff(tc.want, slices.Compact(s.list())); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			wantFailures := 0.0
			if tc.err != nil {
				wantFailures = 1
			}
			if got := testutil.ToFloat64(m.metrics.errors.WithLabelValues(OpReclaim)); got != wantFailures {
				t.Errorf("errors_total{operation=%q} = %v, want %v", OpReclaim, got, wantFailures)
			}
			result := resultSuccess
			if tc.dryRun {
				result = resultDryRun
			}
			if got := runsTotal(t, f.reg, TriggerManual, result); got != 1 {
				t.Errorf("runs{manual,%s} = %v, want 1", result, got)
			}
			if !tc.dryRun && len(r.Outcome.LogDirs) != 1 {
				t.Errorf("log directories removed: %+v, want the gone pod's", r.Outcome.LogDirs)
			}
			// A second run finds nothing left to remove: no reclaim.
			if tc.dryRun {
				return
			}
			before := len(s.list())
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
				t.Fatal(err)
			}
			for _, step := range s.list()[before:] {
				if strings.HasPrefix(step, "reclaim") {
					t.Errorf("a run that removed nothing asked to reclaim: %v", s.list()[before:])
				}
			}
		})
	}
}

// TestReclaimNotAskedOnceStopping: once the run's context ended (the agent
// stops) the runtime is not asked to reclaim, and nothing is counted as
// failed.
func TestReclaimNotAskedOnceStopping(t *testing.T) {
	f := newManagerFixture(t)
	s := &steps{}
	m := f.manager(t, func(o *Options) {
		o.Reclaimer = stepReclaimer{s, f.rt, errors.New("context canceled")}
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	out := &Outcome{Containers: []ContainerDecision{{}}, Failures: map[string]int{}}
	m.reclaim(ctx, out)
	if got := s.list(); len(got) != 0 || out.Failures[OpReclaim] != 0 {
		t.Errorf("reclaim with an ended context: calls %v, failures %v; want none", got, out.Failures)
	}
}

// TestManagerStartGraceFollowsRuntimeRequestTimeout: Options'
// RuntimeRequestTimeout (the kubelet's, from the agent's configuration) is
// the deadline the plan gives a created container's start: with 10m, an
// instance created (and seen by the manager) 5m ago is still starting;
// without it, the kubelet's default (2m) and the margin make it a leftover.
func TestManagerStartGraceFollowsRuntimeRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		timeout time.Duration
		want    string
	}{
		{10 * time.Minute, KeepStarting},
		{0, ReasonPerContainerLimit},
	} {
		t.Run(fmt.Sprint(tc.timeout), func(t *testing.T) {
			f := newManagerFixture(t)
			f.addContainer(ctr("p", "app", 3, StateCreated, 0))
			m := f.manager(t, func(o *Options) { o.RuntimeRequestTimeout = tc.timeout })
			if _, err := m.Plan(t.Context()); err != nil {
				t.Fatal(err)
			}
			f.clock.Step(5 * time.Minute)
			plan, err := m.Plan(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, d := range slices.Concat(plan.RemoveContainers, plan.KeepContainers) {
				if d.Container.ID == "p/app/3" {
					got = d.Reason
				}
			}
			if got != tc.want {
				t.Errorf("the instance created 5m ago: %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNoSettleWithoutDisk: a run that removed something waits for the
// runtime's cleanup only to measure the freed space; without Options.Disk
// there is nothing to measure, and it does not wait.
func TestNoSettleWithoutDisk(t *testing.T) {
	f := newManagerFixture(t)
	m := f.manager(t, nil)
	wait := clocktesting.NewFakeClock(t0)
	m.waitClock = wait // a wait would block until the test steps it
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan *Report, 1)
	go func() {
		r, err := m.GarbageCollect(ctx, TriggerManual)
		if err != nil {
			t.Errorf("GarbageCollect: %v", err)
		}
		done <- r
	}()
	for {
		select {
		case r := <-done:
			if r == nil || r.Outcome == nil || len(r.Outcome.Containers) == 0 {
				t.Fatalf("the run removed nothing: %+v", r)
			}
			return
		case <-time.After(10 * time.Millisecond):
			if wait.HasWaiters() {
				cancel()
				<-done
				t.Fatal("a run without Options.Disk waited for its removals to settle")
			}
		}
	}
}

// TestViewGaugeFollowsWhileTheRuntimeCannotBeListed: a run that cannot list
// the runtime plans nothing, but the pod view's gauge still says whether
// the API server's view is authoritative. On a control-plane node a
// runtime restart also takes down the static kube-apiserver: before, the
// gauge kept the last plan's 1, and NodegcPodViewNotAuthoritative stayed
// silent.
func TestViewGaugeFollowsWhileTheRuntimeCannotBeListed(t *testing.T) {
	f := newManagerFixture(t)
	m := f.manager(t, nil)
	listing := func(err error) {
		f.rt.mu.Lock()
		defer f.rt.mu.Unlock()
		if err == nil {
			delete(f.rt.fail, "ListContainers ")
		} else {
			f.rt.fail["ListContainers "] = err
		}
	}
	view := func(v PodView) {
		f.pods.mu.Lock()
		defer f.pods.mu.Unlock()
		f.pods.view = v
	}
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 1 {
		t.Fatalf("after a run with an authoritative view: gauge %v, want 1", got)
	}
	listing(errors.New("connection refused"))
	view(PodView{Reason: ViewUnreachable})
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil {
		t.Fatal("a run that cannot list the runtime: no error")
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("the runtime cannot be listed, the API server cannot be reached: gauge %v, want 0", got)
	}

	// A view the last plan found at odds with the runtime (pods run here
	// that it lacks, and none it lists runs here: a wrong node name) does
	// not turn authoritative because the runtime cannot be listed.
	listing(nil)
	f.addContainer(ctr("other", "app", 0, StateRunning, time.Hour))
	view(live())
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Fatalf("a view that lacks a running pod: gauge %v, want 0", got)
	}
	listing(errors.New("connection refused"))
	_, _ = m.GarbageCollect(t.Context(), TriggerManual)
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("the runtime cannot be listed after a plan found the view at odds with it: gauge %v, want 0", got)
	}
}

// faultyListing is the fixture's runtime, whose listing of all containers
// is rewritten by rewrite, and of all sandboxes by rewriteSandboxes, when
// set (a runtime that misbehaves).
type faultyListing struct {
	*fakeRuntime
	rewrite          func([]*runtimeapi.Container) []*runtimeapi.Container
	rewriteSandboxes func([]*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox
}

func (r faultyListing) ListContainers(ctx context.Context, f *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	cs, err := r.fakeRuntime.ListContainers(ctx, f)
	if err != nil || f.GetPodSandboxId() != "" || r.rewrite == nil {
		return cs, err
	}
	return r.rewrite(cs), nil
}

func (r faultyListing) ListPodSandboxes(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	sbs, err := r.fakeRuntime.ListPodSandboxes(ctx, f)
	if err != nil || r.rewriteSandboxes == nil {
		return sbs, err
	}
	return r.rewriteSandboxes(sbs), nil
}

// TestGarbageCollectContainerIDFaults: pod p (live) has one container that
// ran once and exited, its only, newest dead instance, in a stopped
// sandbox; with maxPerPodContainer 1 nothing of it may go. A runtime that
// lists every entry twice alike lists one container: it stays (before, a
// run removed it about every other time, the plan keeping one entry and
// removing the other), and that is no fault. A runtime that lists it and
// another container under its ID misbehaves: both stay, with the sandbox,
// and each such listing is counted
// (nodegc_container_gc_container_id_faults_total) and logged.
func TestGarbageCollectContainerIDFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rewrite func([]*runtimeapi.Container) []*runtimeapi.Container
		faults  float64
	}{
		{"every entry listed twice", func(cs []*runtimeapi.Container) []*runtimeapi.Container { return append(cs, cs...) }, 0},
		{"another container under its ID", func(cs []*runtimeapi.Container) []*runtimeapi.Container {
			other := proto.Clone(cs[0]).(*runtimeapi.Container)
			other.Metadata.Attempt, other.CreatedAt = 1, cs[0].CreatedAt-int64(time.Hour)
			return append(cs, other)
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newManagerFixture(t)
			f.rt = newFakeRuntime()
			f.addContainer(dead("p", "app", 0, time.Hour))
			f.addSandbox(sbx("p", 0, false, 2*time.Hour))
			m := f.manager(t, func(o *Options) { o.Runtime = faultyListing{fakeRuntime: f.rt, rewrite: tc.rewrite} })
			for run := range 10 {
				r, err := m.GarbageCollect(t.Context(), TriggerManual)
				if err != nil {
					t.Fatal(err)
				}
				if !f.rt.containerIDs()["p/app/0"] || !f.rt.sandboxIDSet()["p/sb0"] {
					t.Fatalf("run %d: the only dead instance of live pod p's container, or its sandbox, was removed (plan: %v); want both kept", run, planIDs(r.Plan))
				}
			}
			if got := testutil.ToFloat64(m.metrics.idFaults.WithLabelValues(listingContainers)); got != 10*tc.faults {
				t.Errorf("nodegc_container_gc_container_id_faults_total{listing=containers} = %v after 10 runs, want %v", got, 10*tc.faults)
			}
		})
	}
}

// TestGarbageCollectSandboxIDFaults: gone pod g has two stopped sandboxes,
// and the runtime lists a third under the older one's ID. Every sandbox
// under that ID stays, each such listing is counted under
// listing="sandboxes" (before, sandbox faults were kept but not counted),
// and the warning names the sandboxes.
func TestGarbageCollectSandboxIDFaults(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	f.addSandbox(sbx("g", 0, false, 3*time.Hour))
	f.addSandbox(sbx("g", 1, false, 2*time.Hour))
	m := f.manager(t, func(o *Options) {
		o.Runtime = faultyListing{fakeRuntime: f.rt, rewriteSandboxes: func(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
			for _, s := range sbs {
				if s.Id == "g/sb0" {
					other := proto.Clone(s).(*runtimeapi.PodSandbox)
					other.Metadata.Attempt = 7
					return append(sbs, other)
				}
			}
			return sbs
		}}
	})
	lines := logLines(t, func(ctx context.Context) {
		for range 3 {
			if _, err := m.GarbageCollect(ctx, TriggerManual); err != nil {
				t.Fatal(err)
			}
		}
	})
	if !f.rt.sandboxIDSet()["g/sb0"] {
		t.Error("sandbox g/sb0, listed with another sandbox under its ID, was removed; want it kept")
	}
	if got := testutil.ToFloat64(m.metrics.idFaults.WithLabelValues(listingSandboxes)); got != 3 {
		t.Errorf("nodegc_container_gc_container_id_faults_total{listing=sandboxes} = %v after 3 runs, want 3", got)
	}
	if got := testutil.ToFloat64(m.metrics.idFaults.WithLabelValues(listingContainers)); got != 0 {
		t.Errorf("nodegc_container_gc_container_id_faults_total{listing=containers} = %v, want 0", got)
	}
	if got := linesWith(lines, "sandboxes without an ID of their own", `g/sb0`); len(got) != 1 {
		t.Errorf("warnings naming the sandbox: %q (all lines %q); want one (the first, none again within a minute)", got, lines)
	}
}

// TestIDFaultWarningBounded: a runtime that lists 500 containers without
// an ID is warned about with a few of them and the count, not one line
// holding all 500.
func TestIDFaultWarningBounded(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	for i := range 500 {
		f.addContainer(dead(fmt.Sprintf("p%d", i), "app", 0, time.Hour))
	}
	m := f.manager(t, func(o *Options) {
		o.Runtime = faultyListing{fakeRuntime: f.rt, rewrite: func(cs []*runtimeapi.Container) []*runtimeapi.Container {
			for _, c := range cs {
				c.Id = ""
			}
			return cs
		}}
	})
	lines := logLines(t, func(ctx context.Context) {
		if _, err := m.GarbageCollect(ctx, TriggerManual); err != nil {
			t.Fatal(err)
		}
	})
	got := linesWith(lines, "containers without an ID of their own")
	if len(got) != 1 {
		t.Fatalf("warnings: %q; want one", got)
	}
	if strings.Count(got[0], "attempt 0") > idFaultExamples || !strings.Contains(got[0], `"count"=500`) {
		t.Errorf("warning %q (%d bytes): want at most %d containers named and the count 500", got[0][:min(len(got[0]), 400)], len(got[0]), idFaultExamples)
	}
}

// TestManagerReadsTheNodeLeaseToVouch: the Manager hands the plan its pod
// source's lease reader. A pod the view lists that runs here, reported
// running on a Ready Node, vouches for the view only while the lease the
// source reads is fresh: stale, the view disagrees and the plan says why,
// and nothing goes as pod_gone; fresh, the pod force-deleted while it runs
// is kept as running and the rest goes. Each plan reads the lease once.
func TestManagerReadsTheNodeLeaseToVouch(t *testing.T) {
	f := newManagerFixture(t)
	f.addContainer(ctr("stuck", "app", 0, StateRunning, 5*time.Hour))
	f.addSandbox(sbx("stuck", 0, true, 5*time.Hour))
	f.pods.view = with(runningIn(live(fixtureUID("p")), map[string]time.Time{fixtureUID("p"): t0.Add(-3 * time.Hour)}), func(v *PodView) {
		v.Node, v.NodeReady = "n1", true
	})
	f.pods.lease = NodeLease{RenewTime: t0.Add(-2 * time.Minute), Duration: 40 * time.Second}
	m := f.manager(t, nil)
	planWithStaleLease(t, f, m, ViewDisagrees)

	f.pods.lease.RenewTime = t0.Add(-5 * time.Second)
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !plan.PodsAuthoritative || plan.PodsLease != "" || f.pods.leaseReads != 2 ||
		!cmp.Equal(plan.PodsMissing, []PodRef{{UID: fixtureUID("stuck"), Namespace: "ns", Name: "stuck"}}) {
		t.Errorf("fresh lease: plan pod view authoritative %v (%q), lease %q, %d reads, missing %v; want authoritative, 2 reads, stuck",
			plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, f.pods.leaseReads, plan.PodsMissing)
	}
	if ids := planIDs(plan); !slices.Contains(ids, fixtureLogDir("gone")+":pod_gone") {
		t.Errorf("fresh lease: removals %v; want the gone pod's", ids)
	}
}

// planWithStaleLease plans with f's lease, renewed two minutes before t0,
// checks that the plan read it once and says it is stale (the view not
// authoritative, for reason), removing nothing as pod_gone, and returns it.
func planWithStaleLease(t *testing.T, f *managerFixture, m *Manager, reason string) *Plan {
	t.Helper()
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := "node lease of n1 stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)"; plan.PodsAuthoritative ||
		plan.PodsReason != reason || plan.PodsLease != want || f.pods.leaseReads != 1 {
		t.Errorf("stale lease: plan pod view authoritative %v (%q), lease %q, %d reads; want %q, %q, 1 read",
			plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, f.pods.leaseReads, reason, want)
	}
	if ids := planIDs(plan); slices.ContainsFunc(ids, func(id string) bool { return strings.HasSuffix(id, ":pod_gone") }) {
		t.Errorf("stale lease: removals %v; want none as pod_gone", ids)
	}
	return plan
}

// staleLeaseManager returns the fixture's manager, for node n1 whose
// lease was renewed two minutes before t0 for 40s, after a first plan
// that found it stale (planWithStaleLease).
func staleLeaseManager(t *testing.T) (*managerFixture, *Manager) {
	t.Helper()
	f := newManagerFixture(t)
	f.pods.view.Node = "n1"
	f.pods.lease = NodeLease{RenewTime: t0.Add(-2 * time.Minute), Duration: 40 * time.Second}
	m := f.manager(t, nil)
	planWithStaleLease(t, f, m, ViewNodeLeaseStale)
	return f, m
}

// TestManagerStaleLeaseKeepsGonePods: the fixture's pod "gone" would go as
// pod_gone; while the source reads the Node's lease stale (no kubelet
// renews it: down, or the machine runs under another node name now), the
// Manager's plans keep it, say why (node_lease_stale), and report that to
// the pod source, so that the image GC does not trust the view either
// (PodImages, through RuntimeChecked); once the lease is renewed, it goes,
// and the source hears the view agrees. Each plan reads the lease once.
func TestManagerStaleLeaseKeepsGonePods(t *testing.T) {
	f, m := staleLeaseManager(t)
	f.pods.lease = NodeLease{} // renewed now (fakePods.renewing)
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ids := planIDs(plan); !plan.PodsAuthoritative || !slices.Contains(ids, fixtureLogDir("gone")+":pod_gone") || f.pods.leaseReads != 2 {
		t.Errorf("renewed lease: plan pod view authoritative %v (%q), removals %v, %d reads; want authoritative, the gone pod's, 2 reads",
			plan.PodsAuthoritative, plan.PodsReason, ids, f.pods.leaseReads)
	}
	if diff := cmp.Diff([]string{ViewNodeLeaseStale, ""}, f.pods.verdicts); diff != "" {
		t.Errorf("checks reported (-want +got):\n%s", diff)
	}
}

// TestManagerStaleLeaseStaysUntilFresh: once a plan found the Node's lease
// stale, a later plan with nothing to remove as pod_gone (the pod the view
// lacked is listed again, or its leftovers are gone) reads the lease before
// telling the pod source that the view agrees: still stale, the image GC
// goes on distrusting the view. Before, such a plan read nothing and said
// the view agreed, and the image GC trusted the view of the machine's
// previous node name again; the authoritative gauge flapped to 1 with it.
// Renewed, the view agrees.
func TestManagerStaleLeaseStaysUntilFresh(t *testing.T) {
	f, m := staleLeaseManager(t)
	f.pods.view = with(live(fixtureUID("p"), fixtureUID("gone")), func(v *PodView) { v.Node = "n1" })
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ids := planIDs(plan); slices.ContainsFunc(ids, func(id string) bool { return strings.HasSuffix(id, ":pod_gone") }) {
		t.Fatalf("the fixture still removes %v as pod_gone; want nothing", ids)
	}
	// The plan itself says so, as the stale one did: the Node Warning,
	// which waits for an episode of stale plans to last, does not start
	// over at each plan with nothing to remove as pod_gone.
	if plan.PodsAuthoritative || plan.PodsReason != ViewNodeLeaseStale || plan.PodsLease == "" {
		t.Errorf("nothing to remove as pod_gone, the lease still stale: plan authoritative %v (%q), lease %q; want %q and why",
			plan.PodsAuthoritative, plan.PodsReason, plan.PodsLease, ViewNodeLeaseStale)
	}
	// A run with nothing to remove as pod_gone, the lease still stale:
	// the gauge says the view is not authoritative (it stays 0 while the
	// lease is stale, unreadable included, rather than flap).
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("a run with the lease still stale: pod_view_authoritative %v; want 0", got)
	}
	f.pods.lease = NodeLease{} // renewed now (fakePods.renewing)
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 1 {
		t.Errorf("a run with the lease renewed: pod_view_authoritative %v; want 1", got)
	}
	if diff := cmp.Diff([]string{ViewNodeLeaseStale, ViewNodeLeaseStale, ViewNodeLeaseStale, ""}, f.pods.verdicts); diff != "" {
		t.Errorf("checks reported: stale, then nothing to remove with the lease still stale (a plan, a run), then renewed (-want +got):\n%s", diff)
	}
}

// TestManagerFirstCheckReadsTheNodeLease: the agent's first plan that
// checks an authoritative view reads the Node's lease even with nothing to
// remove as pod_gone. Before, it read nothing and told the pod source the
// view agreed: on a machine renamed without a reboot under an agent that
// kept the old name, the image GC trusted the old name's pods (and not the
// images of the new name's pods about to run, with no container yet) until
// some plan had a pod_gone candidate. Stale, the verdict stays so until a
// read finds the lease fresh; fresh, later plans read no lease.
func TestManagerFirstCheckReadsTheNodeLease(t *testing.T) {
	f := newManagerFixture(t)
	f.pods.view = with(live(fixtureUID("p"), fixtureUID("gone")), func(v *PodView) { v.Node = "n1" })
	f.pods.lease = NodeLease{RenewTime: t0.Add(-2 * time.Minute), Duration: 40 * time.Second}
	m := f.manager(t, nil)
	for range 2 {
		plan, err := m.Plan(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ids := planIDs(plan); slices.ContainsFunc(ids, func(id string) bool { return strings.HasSuffix(id, ":pod_gone") }) {
			t.Fatalf("the fixture removes %v as pod_gone; want nothing", ids)
		}
	}
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.metrics.podsAuthoritative); got != 0 {
		t.Errorf("the lease stale since start: pod_view_authoritative %v; want 0", got)
	}
	f.pods.lease = NodeLease{} // renewed now (fakePods.renewing)
	for range 3 {
		if _, err := m.Plan(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{ViewNodeLeaseStale, ViewNodeLeaseStale, ViewNodeLeaseStale, "", "", ""}, f.pods.verdicts); diff != "" {
		t.Errorf("checks reported: stale from the first plan (two plans, a run), then renewed (-want +got):\n%s", diff)
	}
	if f.pods.leaseReads != 4 {
		t.Errorf("lease reads %d; want 4: one per plan while stale, one that found it fresh, none after", f.pods.leaseReads)
	}
}

// errReclaimer fails every Reclaim with err, nil for none.
type errReclaimer struct{ err error }

func (r *errReclaimer) Reclaim(context.Context) error { return r.err }

// TestOperationFailingRuns: nodegc_container_gc_operation_failing_runs
// counts, per operation whose failure leaves the run a success, the runs in
// a row in which it failed: 0 after a run in which it was done and did not
// fail, unchanged by a run that did not do it (no reclaim without a
// removal), so that an alert on it fires however far apart the runs are.
func TestOperationFailingRuns(t *testing.T) {
	f := newManagerFixture(t)
	rec := &errReclaimer{err: errors.New("containerd unreachable")}
	m := f.manager(t, func(o *Options) { o.Reclaimer = rec })
	failing := func(op string) float64 {
		t.Helper()
		families, err := f.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n, ok := testbed.MetricSum(families, "nodegc_container_gc_operation_failing_runs", "operation="+op)
		if !ok {
			t.Fatalf("no nodegc_container_gc_operation_failing_runs{operation=%q}", op)
		}
		return n
	}
	run := func() {
		t.Helper()
		if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
			t.Fatalf("run failed: %v", err)
		}
	}
	for _, op := range []string{OpReadExitTime, OpReadVersion, OpReclaim} {
		if got := failing(op); got != 0 {
			t.Errorf("before any run: %s %v, want 0", op, got)
		}
	}
	f.rt.mu.Lock()
	f.rt.fail["Version "] = errors.New("unimplemented")
	f.rt.mu.Unlock()
	run() // removes the gone pod's container and sandbox: reclaim fails
	if got, got2 := failing(OpReadVersion), failing(OpReclaim); got != 1 || got2 != 1 {
		t.Errorf("after a run in which both failed: read_version %v, reclaim %v, want 1, 1", got, got2)
	}
	run() // nothing to remove: no reclaim
	if got, got2 := failing(OpReadVersion), failing(OpReclaim); got != 2 || got2 != 1 {
		t.Errorf("after a second run, which removed nothing: read_version %v, reclaim %v, want 2, 1 (not tried)", got, got2)
	}
	// Made since the last run, and the pod list later (a container the
	// last plan did not list counts as made after it, however old its
	// time: timeline.floor).
	f.addContainer(dead("gone2", "app", 0, 5*time.Hour))
	f.addSandbox(sbx("gone2", 0, false, 5*time.Hour))
	f.listLater(2 * time.Minute)
	run()
	if got := failing(OpReclaim); got != 2 {
		t.Errorf("after a third run whose reclaim failed: reclaim %v, want 2", got)
	}
	f.rt.mu.Lock()
	delete(f.rt.fail, "Version ")
	f.rt.mu.Unlock()
	rec.err = nil
	f.addContainer(dead("gone3", "app", 0, 5*time.Hour))
	f.addSandbox(sbx("gone3", 0, false, 5*time.Hour))
	f.listLater(2 * time.Minute)
	run()
	if got, got2 := failing(OpReadVersion), failing(OpReclaim); got != 0 || got2 != 0 {
		t.Errorf("after a run in which both worked: read_version %v, reclaim %v, want 0, 0", got, got2)
	}
}

// TestPodViewNodeOnlyGauge: nodegc_container_gc_pod_view_node_only is 1 for
// an agent without API access (no pod source: its view is never
// authoritative, by design) and 0 for one with it, so that an alert on the
// view can leave node-only agents out.
func TestPodViewNodeOnlyGauge(t *testing.T) {
	for name, tc := range map[string]struct {
		nodeOnly bool
		want     float64
	}{"node-only": {true, 1}, "with API access": {false, 0}} {
		t.Run(name, func(t *testing.T) {
			f := newManagerFixture(t)
			m := f.manager(t, func(o *Options) {
				if tc.nodeOnly {
					o.Pods = nil
				}
			})
			if _, err := m.GarbageCollect(t.Context(), TriggerManual); err != nil {
				t.Fatalf("run failed: %v", err)
			}
			families, err := f.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got, ok := testbed.MetricSum(families, "nodegc_container_gc_pod_view_node_only")
			if !ok || got != tc.want {
				t.Errorf("nodegc_container_gc_pod_view_node_only %v (exported %v), want %v", got, ok, tc.want)
			}
		})
	}
}
