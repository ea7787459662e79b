package agent

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/pkg/containers"
)

// TestPodViewEventOncePerEpisode: a container GC plan whose pod view
// disagrees with the runtime (a wrong node name) puts one
// PodViewNotAuthoritative Warning on the Node, naming a few of the pods
// the view lacks; the runs that follow while it still disagrees add none,
// and a new episode after agreement adds one again.
func TestPodViewEventOncePerEpisode(t *testing.T) {
	rec := record.NewFakeRecorder(20)
	e := &nodeEvents{recorder: rec, node: &corev1.ObjectReference{Kind: "Node", Name: "node-a"}}
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
	drain:
		for {
			select {
			case ev := <-rec.Events:
				got = append(got, ev)
			default:
				break drain
			}
		}
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
