package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/images"
)

// testNodeEvents returns the events of Node node-a, recorded by a fake
// recorder, logged into a buffer at verbosity v.
func testNodeEvents(v int) (*nodeEvents, *record.FakeRecorder, *bytes.Buffer) {
	var logs bytes.Buffer
	rec := record.NewFakeRecorder(20)
	e := &nodeEvents{recorder: rec, node: &corev1.ObjectReference{Kind: "Node", Name: "node-a"},
		logger: textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(v), textlogger.Output(&logs)))}
	return e, rec, &logs
}

// drainEvents returns the events rec holds, without waiting.
func drainEvents(rec *record.FakeRecorder) []string {
	var got []string
	for {
		select {
		case ev := <-rec.Events:
			got = append(got, ev)
		default:
			return got
		}
	}
}

// TestPodViewEventOncePerEpisode: a container GC plan whose pod view
// disagrees with the runtime (a wrong node name) puts one
// PodViewNotAuthoritative Warning on the Node, naming a few of the pods
// the view lacks; the runs that follow while it still disagrees add none,
// and a new episode after agreement adds one again.
func TestPodViewEventOncePerEpisode(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	var missing []containers.PodRef
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		missing = append(missing, containers.PodRef{UID: "uid-" + n, Namespace: "team", Name: n})
	}
	disagrees := &containers.Report{Plan: &containers.Plan{PodsReason: containers.ViewDisagrees, PodsNode: "node-a", PodsMissing: missing}}
	agrees := &containers.Report{Plan: &containers.Plan{PodsAuthoritative: true, PodsNode: "node-a"}}
	noNode := &containers.Report{Plan: &containers.Plan{PodsReason: containers.ViewNodeNotFound, PodsNode: "node-a"}}
	failed := &containers.Report{Plan: agrees.Plan, Run: gcrun.Run{Err: errors.New("boom")}}

	var got []string
	for _, r := range []*containers.Report{disagrees, disagrees, disagrees, noNode, agrees, disagrees, failed} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 3 {
		t.Fatalf("events %q, want a PodViewNotAuthoritative per episode (2) and a ContainerGCFailed", got)
	}
	for _, ev := range got[:2] {
		for _, want := range []string{"Warning " + EventPodViewNotAuthoritative, `node "node-a"`, "lack 7 pods", "team/a (uid-a)", "team/e (uid-e)", "and 2 more"} {
			if !strings.Contains(ev, want) {
				t.Errorf("event %q lacks %q", ev, want)
			}
		}
	}
	if !strings.HasPrefix(got[2], "Warning "+EventContainerGCFailed) {
		t.Errorf("last event %q, want ContainerGCFailed", got[2])
	}
}

// TestPodViewEventSaysWhyTheLeaseDidNotVouch: when pods the view lists run
// here but its Node's lease is stale (the machine ran under that name
// before; its kubelet is gone), the PodViewNotAuthoritative Warning says so.
func TestPodViewEventSaysWhyTheLeaseDidNotVouch(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	lease := "node lease of node-a stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)"
	e.containerGCReport(&containers.Report{Plan: &containers.Plan{PodsReason: containers.ViewDisagrees, PodsNode: "node-a",
		PodsMissing: []containers.PodRef{{UID: "uid-web", Namespace: "team", Name: "web"}}, PodsLease: lease}})
	got := drainEvents(rec)
	if len(got) != 1 || !strings.Contains(got[0], "do not show the view is this node's: "+lease) {
		t.Errorf("events %q, want one PodViewNotAuthoritative naming the stale lease", got)
	}
}

// TestPodLogsUnseenEventOncePerEpisode: a container GC plan that finds the
// pod logs unseen (a disk mounted on /var/log/pods after nodegc's
// container started) puts one PodLogsUnseen Warning on the Node, saying
// what stops and to restart nodegc's pod; the plans that follow while it
// lasts, and a run that cannot list the runtime (no plan), add none, and a
// new episode after the logs were seen adds one again.
func TestPodLogsUnseenEventOncePerEpisode(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	now := time.Unix(1000, 0)
	report := func(unseen bool) *containers.Report {
		now = now.Add(time.Minute) // the container GC's default period
		return &containers.Report{Plan: &containers.Plan{PodsAuthoritative: true, PodsNode: "node-a", PodLogsUnseen: unseen, Now: now}}
	}
	var got []string
	var per []int
	for _, unseen := range []bool{false, true, true, true, false, true, false, true, true, true, true} {
		e.containerGCReport(report(unseen))
		ev := drainEvents(rec)
		got = append(got, ev...)
		per = append(per, len(ev))
	}
	// An episode of one snapshot (a status read that failed once) is not
	// warned about; a lasting one is, once, at its third plan (2 minutes).
	if want := []int{0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0}; !slices.Equal(per, want) {
		t.Fatalf("events per plan %v, want %v (a PodLogsUnseen per lasting episode): %q", per, want, got)
	}
	for _, ev := range got {
		for _, want := range []string{"Warning " + EventPodLogsUnseen, `node "node-a"`, "no container log link", "Restart nodegc's pod"} {
			if !strings.Contains(ev, want) {
				t.Errorf("event %q lacks %q", ev, want)
			}
		}
	}
}

// TestPodViewEventWhenTheRuntimeLacksThePods: a plan whose runtime lists
// none of the pods the kubelet reports running (another runtime than the
// kubelet's) puts one PodViewNotAuthoritative Warning on the Node, naming
// a few of those pods and containerRuntimeEndpoint; the Node is this
// machine's then (the view passed the boot ID check), so other failures
// are Events too.
func TestPodViewEventWhenTheRuntimeLacksThePods(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	lacks := &containers.Report{Plan: &containers.Plan{PodsReason: containers.ViewRuntimeLacksPods, PodsNode: "node-a",
		PodsNotInRuntime: []containers.PodRef{{UID: "uid-a", Namespace: "team", Name: "a"}, {UID: "uid-b", Namespace: "team", Name: "b"}}}}
	failed := &containers.Report{Plan: lacks.Plan, Run: gcrun.Run{Err: errors.New("boom")}}
	var got []string
	for _, r := range []*containers.Report{lacks, lacks, failed} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 2 {
		t.Fatalf("events %q, want one PodViewNotAuthoritative and a ContainerGCFailed", got)
	}
	for _, want := range []string{"Warning " + EventPodViewNotAuthoritative, "team/a (uid-a), team/b (uid-b)", "containerRuntimeEndpoint", `node "node-a"`} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q lacks %q", got[0], want)
		}
	}
	if !strings.HasPrefix(got[1], "Warning "+EventContainerGCFailed) {
		t.Errorf("last event %q, want ContainerGCFailed", got[1])
	}
}

// TestPodViewEventWhenTheNodeReportsAnotherRuntime: plans that find the
// Node's kubelet reporting another runtime than the one listed put one
// PodViewNotAuthoritative Warning on the Node, naming both runtimes and
// containerRuntimeEndpoint, once that has lasted otherRuntimeWarnAfter: a
// runtime upgraded in place differs only until the kubelet reports it.
func TestPodViewEventWhenTheNodeReportsAnotherRuntime(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	other := func(at time.Duration) *containers.Report {
		return &containers.Report{Plan: &containers.Plan{Now: t0.Add(at), PodsReason: containers.ViewNodeOtherRuntime, PodsNode: "node-a",
			NodeRuntime: "containerd://1.7.23-k3s2", Runtime: "containerd://1.7.24"}}
	}
	agrees := func(at time.Duration) *containers.Report {
		return &containers.Report{Plan: &containers.Plan{Now: t0.Add(at), PodsAuthoritative: true, PodsNode: "node-a"}}
	}
	var got []string
	for _, r := range []*containers.Report{
		other(0), agrees(10 * time.Second), // upgraded in place, then reported
		other(time.Minute), other(time.Minute + otherRuntimeWarnAfter - time.Second),
	} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 0 {
		t.Fatalf("events %q before the difference lasted %v, want none", got, otherRuntimeWarnAfter)
	}
	for _, r := range []*containers.Report{other(time.Minute + otherRuntimeWarnAfter), other(time.Hour)} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 1 {
		t.Fatalf("events %q, want one PodViewNotAuthoritative", got)
	}
	for _, want := range []string{"Warning " + EventPodViewNotAuthoritative, `node "node-a"`, "containerd://1.7.23-k3s2", "containerd://1.7.24", "containerRuntimeEndpoint"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q lacks %q", got[0], want)
		}
	}
}

// TestPodViewEventWhenTheNodeLeaseIsStale: plans that would remove
// something as pod_gone but find the Node's lease stale (its kubelet down,
// or running under another node name: a machine renamed without a reboot)
// put one PodViewNotAuthoritative Warning on the Node, naming the lease,
// once that has lasted leaseStaleWarnAfter: a kubelet restart leaves it
// stale only until the kubelet renews it.
func TestPodViewEventWhenTheNodeLeaseIsStale(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	why := "node lease of node-a stale since 2026-11-30T07:59:20Z (renewed 2026-11-30T07:58:40Z, for 40s)"
	stale := func(at time.Duration) *containers.Report {
		return &containers.Report{Plan: &containers.Plan{Now: t0.Add(at), PodsReason: containers.ViewNodeLeaseStale, PodsNode: "node-a", PodsLease: why}}
	}
	agrees := func(at time.Duration) *containers.Report {
		return &containers.Report{Plan: &containers.Plan{Now: t0.Add(at), PodsAuthoritative: true, PodsNode: "node-a"}}
	}
	var got []string
	for _, r := range []*containers.Report{
		agrees(0), stale(10 * time.Second), agrees(40 * time.Second), // the kubelet restarted
		stale(time.Minute), stale(time.Minute + leaseStaleWarnAfter - time.Second),
	} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 0 {
		t.Fatalf("events %q before the stale lease lasted %v, want none", got, leaseStaleWarnAfter)
	}
	for _, r := range []*containers.Report{stale(time.Minute + leaseStaleWarnAfter), stale(time.Hour)} {
		e.containerGCReport(r)
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 1 {
		t.Fatalf("events %q, want one PodViewNotAuthoritative", got)
	}
	for _, want := range []string{"Warning " + EventPodViewNotAuthoritative, `node "node-a"`, why, "removes nothing because its pod is gone"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q lacks %q", got[0], want)
		}
	}
}

// TestPodViewEventLeaseStaleSinceStart: when every plan since the agent
// started found the Node's lease stale (a kubelet down since, or a
// ServiceAccount without get on leases), no view ever agreed; the Node
// reports this machine's boot, so the Warning is posted once the stale
// lease has lasted, not held for a view that agrees (before, it was held
// for good, logged at V(2) only), and names the RBAC cause too.
func TestPodViewEventLeaseStaleSinceStart(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	why := `node lease of node-a unreadable: leases.coordination.k8s.io "node-a" is forbidden`
	var got []string
	for _, at := range []time.Duration{0, time.Minute, leaseStaleWarnAfter, time.Hour} {
		e.containerGCReport(&containers.Report{Plan: &containers.Plan{Now: t0.Add(at), PodsReason: containers.ViewNodeLeaseStale, PodsNode: "node-a", PodsLease: why}})
		got = append(got, drainEvents(rec)...)
	}
	if len(got) != 1 {
		t.Fatalf("events %q, want one PodViewNotAuthoritative", got)
	}
	for _, want := range []string{"Warning " + EventPodViewNotAuthoritative, why, "get on leases in kube-node-lease"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("event %q lacks %q", got[0], want)
		}
	}
}

// TestInterruptedRunsPostNoEvent: a run the agent's stop cancelled (SIGTERM,
// at every rollout) ends with context.Canceled, or with the Canceled status
// of the runtime call it cut short, which does not wrap it. That is no
// failure of the node: no ImageGCFailed or ContainerGCFailed Warning on the
// Node, a V(2) line instead. A run that failed for another reason still
// posts its event.
func TestInterruptedRunsPostNoEvent(t *testing.T) {
	e, rec, logs := testNodeEvents(2)
	// A view found the Node this machine's: failures are Events.
	e.containerGCReport(&containers.Report{Plan: &containers.Plan{PodsAuthoritative: true, PodsNode: "node-a"}})
	canceledCall := grpcstatus.Error(codes.Canceled, "context canceled")
	interrupted := []error{
		fmt.Errorf("image GC stopped after 2 removals: %w", context.Canceled),
		fmt.Errorf("listing images: %w", canceledCall),
		errors.Join(fmt.Errorf("container c1: removing container c1: %w", canceledCall),
			fmt.Errorf("container GC stopped after 3 of 9 planned removals: %w", context.Canceled)),
	}
	for _, err := range interrupted {
		e.imageGCReport(&images.Report{Run: gcrun.Run{Err: err}})
		e.containerGCReport(&containers.Report{Run: gcrun.Run{Err: err}})
	}
	for _, ev := range drainEvents(rec) {
		t.Errorf("event %q for a run the agent's stop interrupted", ev)
	}
	if n := strings.Count(logs.String(), "run interrupted by the agent's stop: no Node event"); n != 2*len(interrupted) {
		t.Errorf("%d V(2) lines saying so, want %d:\n%s", n, 2*len(interrupted), logs.String())
	}

	failed := grpcstatus.Error(codes.DeadlineExceeded, "context deadline exceeded")
	e.imageGCReport(&images.Report{Run: gcrun.Run{Err: fmt.Errorf("listing images: %w", failed)}})
	e.containerGCReport(&containers.Report{Run: gcrun.Run{Err: errors.Join(errors.New("disk on fire"))}})
	for _, want := range []string{"Warning " + EventImageGCFailed, "Warning " + EventContainerGCFailed} {
		select {
		case ev := <-rec.Events:
			if !strings.HasPrefix(ev, want) {
				t.Errorf("event %q, want %s", ev, want)
			}
		default:
			t.Errorf("no %s event for a run that failed", want)
		}
	}
}

// TestNoEventsOnANodeNotThisMachines: the agent's nodeName names a Node
// that reports another boot ID than this machine's (a nodeName left in a
// ConfigMap every node reads, a typo naming a neighbour), or no Node (a
// typo naming none): the pod view says so (ViewNodeOtherBoot,
// ViewNodeNotFound), and this machine's failures are not that Node's. No
// Event goes onto it: not FreeDiskSpaceFailed or ContainerGCFailed from a
// run whose plan says so, nor InvalidDiskCapacity, ImageGCFailed or
// ContainerGCFailed from a run without a plan (the runtime or the disk could
// not be read) or whose view could not tell (unreachable): those go by the
// last view that could. One line at the default verbosity says so per
// episode; once a view finds the Node this machine's, failures are Events
// again. Before, every failure was recorded on that Node (only
// PodViewNotAuthoritative was left out).
func TestNoEventsOnANodeNotThisMachines(t *testing.T) {
	for _, reason := range []string{containers.ViewNodeOtherBoot, containers.ViewNodeNotFound} {
		t.Run(reason, func(t *testing.T) {
			e, rec, logs := testNodeEvents(0)
			removal := gcrun.Run{Err: errors.New("removing container 0123: rpc error: code = Unknown desc = boom")}
			notOurs := func() {
				e.containerGCReport(&containers.Report{Plan: &containers.Plan{PodsReason: reason, PodsNode: "node-a"}, Run: removal})
				e.imageGCReport(&images.Report{Plan: &images.Plan{PodsView: reason}, Run: gcrun.Run{Err: &images.FreeDiskSpaceError{BytesToFree: 10 << 30}}})
				e.imageGCReport(&images.Report{Run: gcrun.Run{Err: fmt.Errorf("image filesystem /var/lib/containerd: %w: capacity 0", images.ErrInvalidDiskCapacity)}})
				e.imageGCReport(&images.Report{Plan: &images.Plan{PodsView: containers.ViewUnreachable}, Run: gcrun.Run{Err: errors.New("listing images: boom")}})
				e.containerGCReport(&containers.Report{Run: gcrun.Run{Err: errors.New("listing containers: boom")}})
			}
			const told = "No Node Events while the Node of this node's name is not this machine's"
			for episode := 1; episode <= 2; episode++ {
				notOurs()
				notOurs()
				for _, ev := range drainEvents(rec) {
					t.Errorf("episode %d: event recorded on Node node-a, which the pod view says is %s: %q", episode, reason, ev)
				}
				if n := strings.Count(logs.String(), told); n != episode {
					t.Errorf("after episode %d: %d lines saying Node events are not recorded, want %d:\n%s", episode, n, episode, logs.String())
				}
				e.containerGCReport(&containers.Report{Plan: &containers.Plan{PodsAuthoritative: true, PodsNode: "node-a"}, Run: removal})
				e.imageGCReport(&images.Report{Run: gcrun.Run{Err: errors.New("listing images: boom")}})
				got := drainEvents(rec)
				if len(got) != 2 || !strings.HasPrefix(got[0], "Warning "+EventContainerGCFailed) || !strings.HasPrefix(got[1], "Warning "+EventImageGCFailed) {
					t.Errorf("episode %d: once the view finds the Node this machine's, events %q, want ContainerGCFailed and ImageGCFailed", episode, got)
				}
			}
			if !strings.Contains(logs.String(), `node="node-a" view="`+reason+`"`) {
				t.Errorf("the log line does not name the Node and the view:\n%s", logs.String())
			}
		})
	}
}

// TestAnOlderViewSaysNothingNew: the image and container GC report side by
// side. A container GC plan found the Node of this name another machine's;
// then a long image GC run, whose plan took its view before that, ends
// failing. Its older, authoritative view must not let the failure onto
// that Node (before, the last view reported won, and FreeDiskSpaceFailed
// went onto it). A newer view that finds the Node this machine's again
// does.
func TestAnOlderViewSaysNothingNew(t *testing.T) {
	e, rec, _ := testNodeEvents(0)
	t1 := time.Now()
	t2 := t1.Add(time.Minute)
	e.containerGCReport(&containers.Report{Plan: &containers.Plan{Now: t2, PodsReason: containers.ViewNodeOtherBoot, PodsNode: "node-a"}})
	failed := gcrun.Run{Err: &images.FreeDiskSpaceError{BytesToFree: 10 << 30}}
	e.imageGCReport(&images.Report{Plan: &images.Plan{Now: t1, PodsView: images.PodsAuthoritative}, Run: failed})
	if got := drainEvents(rec); len(got) > 0 {
		t.Errorf("after a newer view found Node node-a another machine's, an older one let events onto it: %q", got)
	}
	e.imageGCReport(&images.Report{Plan: &images.Plan{Now: t2.Add(time.Minute), PodsView: images.PodsAuthoritative}, Run: failed})
	if got := drainEvents(rec); len(got) != 1 {
		t.Errorf("a newer view found the Node this machine's: events %q, want the failure", got)
	}
}

// TestEventsWaitForAViewThatTells: at the agent's start no pod view has
// said whose the Node of this node's name is (the pods are not listed
// yet, or the API server is slow), while the first image GC run may
// already fail. Its Event waits: when the first view that can tell finds
// the Node another machine's, or missing, the Event goes onto no Node
// (logged instead); when it finds it this machine's, it is recorded then,
// once per reason with the latest message. Before, it went onto the Node
// of that name at once, another machine's or not.
func TestEventsWaitForAViewThatTells(t *testing.T) {
	failed := gcrun.Run{Err: &images.FreeDiskSpaceError{BytesToFree: 10 << 30}}
	unsynced := &images.Report{Plan: &images.Plan{PodsView: containers.ViewNotSynced}, Run: failed}
	for name, tc := range map[string]struct {
		view       *containers.Plan
		wantEvents []string
	}{
		"another machine's":  {view: &containers.Plan{PodsReason: containers.ViewNodeOtherBoot, PodsNode: "node-a"}},
		"missing":            {view: &containers.Plan{PodsReason: containers.ViewNodeNotFound, PodsNode: "node-a"}},
		"this machine's":     {view: &containers.Plan{PodsAuthoritative: true, PodsNode: "node-a"}, wantEvents: []string{EventFreeDiskSpaceFailed, EventContainerGCFailed}},
		"disagreeing, ours":  {view: &containers.Plan{PodsReason: containers.ViewDisagrees, PodsNode: "node-a"}, wantEvents: []string{EventFreeDiskSpaceFailed, EventContainerGCFailed, EventPodViewNotAuthoritative}},
		"unreachable, later": {view: &containers.Plan{PodsReason: containers.ViewUnreachable, PodsNode: "node-a"}, wantEvents: nil},
	} {
		t.Run(name, func(t *testing.T) {
			e, rec, logs := testNodeEvents(2)
			e.imageGCReport(unsynced)
			e.imageGCReport(unsynced)
			e.containerGCReport(&containers.Report{Run: gcrun.Run{Err: errors.New("listing containers: boom")}})
			if got := drainEvents(rec); len(got) > 0 {
				t.Fatalf("events before any pod view said whose Node node-a is: %q", got)
			}
			e.containerGCReport(&containers.Report{Plan: tc.view})
			var got []string
			for _, ev := range drainEvents(rec) {
				reason, _, _ := strings.Cut(strings.TrimPrefix(ev, "Warning "), " ")
				got = append(got, reason)
			}
			if diff := cmp.Diff(tc.wantEvents, got); diff != "" {
				t.Errorf("events once the view said %q (-want +got):\n%s\n%s", tc.view.PodsReason, diff, logs.String())
			}
			if tc.view.PodsReason == containers.ViewNodeOtherBoot && !strings.Contains(logs.String(), "No Node Events while the Node of this node's name is not this machine's") {
				t.Errorf("no line says the held failures go onto no Node:\n%s", logs.String())
			}
		})
	}
}
