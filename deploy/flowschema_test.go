package deploy

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestChartFlowSchema: the owner collectors' requests are classified by
// API Priority and Fairness into workload-high, as kube-controller-
// manager's garbage collector's are, not into workload-low with every
// other ServiceAccount's: the chart renders a FlowSchema for their
// ServiceAccount in mode deployment, none in mode auto (whose
// ServiceAccount is every node agent's), off, or with
// ownerGC.flowSchema.enabled false, and one with the defaults where the
// values have no ownerGC.flowSchema (helm upgrade --reuse-values of a
// release from before it). On a real kube-apiserver, a request of that
// ServiceAccount answers with the FlowSchema's and workload-high's UIDs
// (X-Kubernetes-PF-* headers), one of another ServiceAccount does not,
// and so does one of a release in kube-system, which the API server's
// kube-system-service-accounts would otherwise take first.
func TestChartFlowSchema(t *testing.T) {
	const ns = "gc-system"
	cases := map[string]struct {
		ns   string
		args []string
		sa   string // "": no FlowSchema
	}{
		"deployment":             {ns, []string{"--set", "ownerGC.mode=deployment"}, "nodegc-owner"},
		"auto":                   {ns, []string{"--set", "ownerGC.mode=auto"}, ""},
		"off":                    {ns, []string{"--set", "ownerGC.mode=off"}, ""},
		"disabled":               {ns, []string{"--set", "ownerGC.flowSchema.enabled=false"}, ""},
		"values from before":     {ns, []string{"--set", "ownerGC.flowSchema=null"}, "nodegc-owner"},
		"release in kube-system": {"kube-system", nil, "nodegc-owner"},
	}
	rendered := map[string]*flowcontrolv1.FlowSchema{}
	for name, tc := range cases {
		ns := tc.ns
		fs := find(render(t, ns, tc.args...), "FlowSchema", "nodegc-owner-gc")
		if (fs != nil) != (tc.sa != "") {
			t.Errorf("%s: FlowSchema nodegc-owner-gc rendered %v, want %v", name, fs != nil, tc.sa != "")
			continue
		}
		if fs == nil {
			continue
		}
		typed := typedFlowSchema(t, fs)
		if got := typed.Spec.PriorityLevelConfiguration.Name; got != "workload-high" {
			t.Errorf("%s: priority level %q, want workload-high", name, got)
		}
		var subjects []string
		for _, r := range typed.Spec.Rules {
			for _, s := range r.Subjects {
				if s.ServiceAccount != nil {
					subjects = append(subjects, s.ServiceAccount.Namespace+"/"+s.ServiceAccount.Name)
				}
			}
		}
		if len(subjects) != 1 || subjects[0] != ns+"/"+tc.sa {
			t.Errorf("%s: FlowSchema subjects %v, want [%s/%s]", name, subjects, ns, tc.sa)
		}
		rendered[name] = typed
	}

	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	cs := c.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	high, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "workload-high", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	classified := func(ns, sa string) (flowSchema, priorityLevel string) {
		t.Helper()
		cfg := c.RESTConfigAs("system:serviceaccount:"+ns+":"+sa, "system:serviceaccounts", "system:serviceaccounts:"+ns)
		var mu sync.Mutex
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if resp != nil {
					mu.Lock()
					flowSchema = resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
					priorityLevel = resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
					mu.Unlock()
				}
				return resp, err
			})
		}
		// Forbidden or not (no RBAC here), the request is classified first.
		_, _ = kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		mu.Lock()
		defer mu.Unlock()
		return flowSchema, priorityLevel
	}
	// Each release's FlowSchema in turn (one name): it may take a moment
	// to reach the classifier.
	for _, name := range []string{"deployment", "release in kube-system"} {
		ns := cases[name].ns
		fs, err := cs.FlowcontrolV1().FlowSchemas().Create(ctx, rendered[name], metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: the API server refuses the rendered FlowSchema: %v", name, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			gotFS, gotPL := classified(ns, "nodegc-owner")
			if gotFS == string(fs.UID) && gotPL == string(high.UID) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: a request of %s/nodegc-owner went to FlowSchema %q, priority level %q; want %s's %s and workload-high's %s",
					name, ns, gotFS, gotPL, fs.Name, fs.UID, high.UID)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if gotFS, _ := classified(ns, "someone-else"); gotFS == string(fs.UID) {
			t.Errorf("%s: a request of another ServiceAccount went to FlowSchema %q: the FlowSchema matches more than nodegc's", name, gotFS)
		}
		if err := cs.FlowcontrolV1().FlowSchemas().Delete(ctx, fs.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Gone from the classifier before the next one is created.
		deadline = time.Now().Add(30 * time.Second)
		for gotFS, _ := classified(ns, "nodegc-owner"); gotFS == string(fs.UID); gotFS, _ = classified(ns, "nodegc-owner") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: FlowSchema %s still classifies 30s after its deletion", name, fs.Name)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// typedFlowSchema converts a rendered FlowSchema to its API type.
func typedFlowSchema(t *testing.T, o *unstructured.Unstructured) *flowcontrolv1.FlowSchema {
	t.Helper()
	data, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var fs flowcontrolv1.FlowSchema
	if err := json.Unmarshal(data, &fs); err != nil {
		t.Fatal(err)
	}
	return &fs
}
