package containers_test

import (
	"context"
	"net/http"
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

// recordLists records the resourceVersion parameter of every pod LIST sent
// through it ("-" when absent).
type recordLists struct {
	next http.RoundTripper
	mu   sync.Mutex
	rvs  []string
}

func (r *recordLists) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method == http.MethodGet && q.Get("watch") == "" && q.Get("fieldSelector") != "" && req.URL.Path == "/api/v1/pods" {
		rv := "-"
		if q.Has("resourceVersion") {
			rv = q.Get("resourceVersion")
		}
		r.mu.Lock()
		r.rvs = append(r.rvs, rv)
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// TestPodListsAreConsistentReads, on a real kube-apiserver: the pod view
// lists the node's pods with consistent reads (no resourceVersion: as of the
// request), not resourceVersion "0", which the API server may answer from a
// watch cache minutes behind etcd (TestStaleListMakesNoPodGone shows what
// such a list would do), and the real API server answers them.
func TestPodListsAreConsistentReads(t *testing.T) {
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
	src, err := containers.NewAPIPodSource(client, name, nil)
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
	lists := func() []string {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return append([]string(nil), rec.rvs...)
	}
	sees := func() bool {
		v := src.View(time.Now())
		return v.Authoritative && len(v.Live) == 1
	}
	testbed.WaitFor(t, 30*time.Second, "the view to be authoritative with the pod", sees)
	if len(lists()) == 0 {
		t.Fatal("no pod list went through the recording transport")
	}
	for i, rv := range lists() {
		if rv != "-" && rv != "" {
			t.Errorf("pod list %d asked resourceVersion %q, want a consistent read (none)", i+1, rv)
		}
	}
	t.Logf("pod lists sent: %d, resourceVersion %q", len(lists()), lists())
}
