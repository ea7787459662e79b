package containers_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/pkg/containers"
)

// recordLists records the parameters of every pod LIST sent through it.
type recordLists struct {
	next http.RoundTripper
	mu   sync.Mutex
	// selected are the lists of the node's pods (with a field selector),
	// probes the others, as "rv=... match=... limit=...".
	selected, probes []string
}

func (r *recordLists) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method == http.MethodGet && q.Get("watch") == "" && req.URL.Path == "/api/v1/pods" {
		rv := "-"
		if q.Has("resourceVersion") {
			rv = q.Get("resourceVersion")
		}
		desc := fmt.Sprintf("rv=%s match=%s limit=%s", rv, q.Get("resourceVersionMatch"), q.Get("limit"))
		r.mu.Lock()
		if q.Get("fieldSelector") != "" {
			r.selected = append(r.selected, desc)
		} else {
			r.probes = append(r.probes, desc)
		}
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// TestPodListsAreNeverStale, on a real kube-apiserver: the pod view
// never lists the node's pods with resourceVersion "0", which the API
// server may answer from a watch cache minutes behind etcd
// (TestStaleListMakesNoPodGone shows what such a list would do). It reads
// etcd's current version with a consistent list of one pod (no selector),
// then lists the node's pods not older than that version, whole (no
// limit), which the watch cache answers once it has caught up; and the
// real API server answers them.
func TestPodListsAreNeverStale(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	const name = "consistent-node"
	registerNode(t, c, name)
	ctx := t.Context()
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	rec := &recordLists{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := containers.NewAPIPodSource(client, containers.PodSourceOptions{NodeName: name})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	lists := func() (selected, probes []string) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Clone(rec.selected), slices.Clone(rec.probes)
	}
	sees := func() bool {
		v := src.View(time.Now())
		return v.Authoritative && len(v.Live) == 1
	}
	testbed.WaitFor(t, 30*time.Second, "the view to be authoritative with the pod", sees)
	selected, probes := lists()
	if len(selected) == 0 || len(probes) != len(selected) {
		t.Fatalf("pod lists: %q, version probes: %q; want one probe per list", selected, probes)
	}
	for i, l := range selected {
		if !strings.HasPrefix(l, "rv=") || strings.HasPrefix(l, "rv=0 ") || strings.HasPrefix(l, "rv=- ") || !strings.Contains(l, "match=NotOlderThan limit=") || !strings.HasSuffix(l, "limit=") {
			t.Errorf("pod list %d: %s; want a version, NotOlderThan, no limit", i+1, l)
		}
		if probes[i] != "rv=- match= limit=1" {
			t.Errorf("version probe %d: %s; want a consistent list of one (no version, limit 1)", i+1, probes[i])
		}
	}
	t.Logf("pod lists: %q, version probes: %q", selected, probes)
}
