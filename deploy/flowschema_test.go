package deploy

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
	"testing"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestChartFlowSchema: the owner GC's requests are classified by API
// Priority and Fairness into workload-high, as kube-controller-manager's
// garbage collector's are, not into workload-low with every other
// ServiceAccount's: the chart renders a FlowSchema for the ServiceAccount
// that runs the owner GC (the owner collectors', or the node agents' in
// mode auto), none in mode off or with ownerGC.flowSchema.enabled false.
// On a real kube-apiserver, a request of that ServiceAccount answers with
// the FlowSchema's and workload-high's UIDs (X-Kubernetes-PF-* headers),
// and one of another ServiceAccount does not.
func TestChartFlowSchema(t *testing.T) {
	const ns = "gc-system"
	cases := map[string]struct {
		args []string
		sa   string // "": no FlowSchema
	}{
		"deployment": {[]string{"--set", "ownerGC.mode=deployment"}, "nodegc-owner"},
		"auto":       {[]string{"--set", "ownerGC.mode=auto"}, "nodegc-node"},
		"off":        {[]string{"--set", "ownerGC.mode=off"}, ""},
		"disabled":   {[]string{"--set", "ownerGC.flowSchema.enabled=false"}, ""},
	}
	rendered := map[string]*flowcontrolv1.FlowSchema{}
	for name, tc := range cases {
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
	fs, err := cs.FlowcontrolV1().FlowSchemas().Create(ctx, rendered["deployment"], metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refuses the rendered FlowSchema: %v", err)
	}
	high, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "workload-high", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	classified := func(sa string) (flowSchema, priorityLevel string) {
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
	// The FlowSchema may take a moment to reach the classifier.
	deadline := time.Now().Add(30 * time.Second)
	for {
		gotFS, gotPL := classified("nodegc-owner")
		if gotFS == string(fs.UID) && gotPL == string(high.UID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a request of nodegc-owner went to FlowSchema %q, priority level %q; want %s's %s and workload-high's %s",
				gotFS, gotPL, fs.Name, fs.UID, high.UID)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if gotFS, gotPL := classified("someone-else"); gotFS == string(fs.UID) || gotPL == string(high.UID) {
		t.Errorf("a request of another ServiceAccount went to FlowSchema %q, priority level %q: the FlowSchema matches more than nodegc's", gotFS, gotPL)
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
