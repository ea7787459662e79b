package containers

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// runLoop runs m.Run until the test ends, its reports sent on the channel
// it returns.
func runLoop(t *testing.T, f *managerFixture, mutate func(*Options)) <-chan *Report {
	t.Helper()
	reports := make(chan *Report, 8)
	m := f.manager(t, func(o *Options) {
		o.OnRun = func(r *Report) { reports <- r }
		if mutate != nil {
			mutate(o)
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return reports
}

// nextReport waits for the loop's next run.
func nextReport(t *testing.T, reports <-chan *Report) *Report {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no GC run")
		return nil
	}
}

// stepUntilRun steps the fake clock a second at a time, for at most
// limit, until the loop runs; it returns the run, or nil if none came.
func stepUntilRun(t *testing.T, f *managerFixture, reports <-chan *Report, limit time.Duration) *Report {
	t.Helper()
	for stepped := time.Duration(0); stepped < limit; stepped += time.Second {
		f.clock.Step(time.Second)
		select {
		case r := <-reports:
			return r
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// TestRunChecksThePodViewOnceItSyncs: at the agent's start the container
// GC's first run comes before the pod informers have synced, and checks no
// view; the image GC, which trusts the view only once a container GC plan
// has checked it against the runtime (PodImages: runtime_unchecked), would
// wait a whole period for the next. Run looks at the view every second
// until a plan has checked one, and runs as soon as it is authoritative;
// once checked, it runs every period again.
func TestRunChecksThePodViewOnceItSyncs(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime() // an empty node: nothing contradicts the view
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-a"}}}
	// Its kubelet renewed its lease (nothing goes as pod_gone without).
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: f.clock.Now()}, LeaseDurationSeconds: ptr.To[int32](40)}}
	src, err := NewAPIPodSource(fake.NewClientset(node, lease), PodSourceOptions{NodeName: "n1", BootID: "boot-a", Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	reports := runLoop(t, f, func(o *Options) { o.Pods = src })
	if r := nextReport(t, reports); r.Plan == nil || r.Plan.PodsReason != ViewNotSynced {
		t.Fatalf("first run: plan %+v, want one on a view %q", r.Plan, ViewNotSynced)
	}
	// The informers sync after the first run.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if !cache.WaitForCacheSync(ctx.Done(), src.HasSynced) {
		t.Fatal("the pod source did not sync")
	}
	if _, v := src.PodImages(); v.Reason != ViewRuntimeUnchecked {
		t.Fatalf("PodImages before a check: reason %q, want %q", v.Reason, ViewRuntimeUnchecked)
	}
	period := f.cfg.Period.Duration
	r := stepUntilRun(t, f, reports, period/2)
	if r == nil {
		t.Fatalf("no run within %v of the view's sync (period %v)", period/2, period)
	}
	if r.Trigger != TriggerPeriodic || !r.Plan.PodsAuthoritative {
		t.Errorf("run after the sync: trigger %q, pod view %q; want %q on an authoritative view", r.Trigger, r.Plan.PodsReason, TriggerPeriodic)
	}
	if _, v := src.PodImages(); !v.Authoritative {
		t.Errorf("PodImages after the run: reason %q, want authoritative", v.Reason)
	}
	if r := stepUntilRun(t, f, reports, 5*time.Second); r != nil {
		t.Errorf("a run %v after the checked one, want none before the period", r.Start.Sub(t0))
	}
}

// TestRunEveryPeriodWithoutAViewToCheck: without a pod source, with a view
// that stays unauthoritative, or with an authoritative one while the
// runtime cannot be listed, Run runs at once and then every period only.
func TestRunEveryPeriodWithoutAViewToCheck(t *testing.T) {
	for name, tc := range map[string]struct {
		pods        PodSource
		runtimeDown bool
	}{
		"node-only":        {},
		"view not synced":  {pods: &fakePods{view: PodView{Reason: ViewNotSynced}}},
		"view unreachable": {pods: &fakePods{view: PodView{Reason: ViewUnreachable}}},
		"runtime down":     {pods: &fakePods{view: live()}, runtimeDown: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := newManagerFixture(t)
			if tc.runtimeDown {
				f.rt.fail["ListPodSandboxes "] = errors.New("runtime down")
			}
			reports := runLoop(t, f, func(o *Options) { o.Pods = tc.pods })
			nextReport(t, reports)
			if r := stepUntilRun(t, f, reports, 5*time.Second); r != nil {
				t.Fatalf("a run %v after the first, want none before the period", r.Start.Sub(t0))
			}
			f.clock.Step(f.cfg.Period.Duration)
			nextReport(t, reports)
		})
	}
}
