package app

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/pkg/ownergc"
)

// heldOwner is an explanation as the leader answers it: a foreground
// deletion waiting for a dependent held by its own finalizer.
func heldOwner() *ownergc.Explanation {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	return &ownergc.Explanation{
		Verdict: "waits for dependent ConfigMap web/held (uid h-1) (blockOwnerDeletion) which is held by finalizer example.com/hold",
		Code:    ownergc.CodeWaitsForDependents,
		Object: ownergc.ObjectInfo{APIVersion: "v1", Kind: "ConfigMap", Resource: "configmaps", Namespace: "web", Name: "owner",
			UID: "o-1", Exists: true, ResourceVersion: "42", DeletionTimestamp: &at, Finalizers: []string{metav1.FinalizerDeleteDependents}},
		InGraph: true, GraphResourceVersion: "42", LeaderSince: at.Add(-time.Hour),
		Owners: []ownergc.OwnerState{{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "web", Name: "top", UID: "t-1",
			Controller: true, Class: "solid", Reason: "owner-observed", Graph: "observed", Checked: "graph"}},
		Dependents: []ownergc.DependentState{
			{APIVersion: "v1", Kind: "ConfigMap", Namespace: "web", Name: "held", UID: "h-1", BlockOwnerDeletion: true,
				BeingDeleted: true, Finalizers: []string{"example.com/hold"}, Read: true},
			{APIVersion: "v1", Kind: "Pod", Namespace: "web", Name: "p", UID: "p-1"},
		},
		DependentsTotal: 3, BlockingTotal: 1,
		Finalizers: []ownergc.FinalizerState{{Name: metav1.FinalizerDeleteDependents, RemovedBy: "owner GC",
			Condition: "once no dependent with blockOwnerDeletion=true remains (1 remain)"}},
		Records: []ownergc.Record{{Time: at.Time, APIVersion: "v1", Kind: "ConfigMap", Namespace: "web", Name: "held", UID: "h-1",
			Action: "delete", PropagationPolicy: "Background", Rule: "owner-deleting-in-foreground",
			Owners: []ownergc.RecordOwner{{APIVersion: "v1", Kind: "ConfigMap", Namespace: "web", Name: "owner", UID: "o-1",
				Class: "waitingForDependentsDeletion", Reason: "owner-deleting-dependents"}}}},
	}
}

const heldOwnerText = `Verdict: waits for dependent ConfigMap web/held (uid h-1) (blockOwnerDeletion) which is held by finalizer example.com/hold
Code:    waits-for-dependents

Object:  ConfigMap web/owner (uid o-1), v1 configmaps, resourceVersion 42
         being deleted since 2026-01-02T03:04:05Z; finalizers: foregroundDeletion
Graph:   observed (resourceVersion 42)

OWNERS (1)
  CLASS  REASON          CHECKED  OWNER
  solid  owner-observed  graph    Deployment web/top (uid t-1) [controller]

DEPENDENTS (2 of 3, 1 blocking)
  BLOCKS  STATE          FINALIZERS        DEPENDENT
  yes     being deleted  example.com/hold  ConfigMap web/held (uid h-1)
  no      -              -                 Pod web/p (uid p-1)

FINALIZERS (1)
  FINALIZER           REMOVED BY  WHEN
  foregroundDeletion  owner GC    once no dependent with blockOwnerDeletion=true remains (1 remain)

DECISION RECORDS (1)
  TIME                  OBJECT                        ACTION             RULE                          OWNERS
  2026-01-02T03:04:05Z  ConfigMap web/held (uid h-1)  delete Background  owner-deleting-in-foreground  ConfigMap web/owner (uid o-1): waitingForDependentsDeletion, owner-deleting-dependents

`

// explainServer answers ExplainPath as an agent does: the explanation for
// configmap web/owner, 503 JSON when not leading, 404 for an unknown
// resource.
func explainServer(t *testing.T, leading bool) (*httptest.Server, *[]url.Values) {
	t.Helper()
	var queries []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != ownergc.ExplainPath {
			http.NotFound(w, req)
			return
		}
		q := req.URL.Query()
		queries = append(queries, q)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case !leading:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(ownergc.ExplainError{LeaderIdentity: "nodegc-owner-5b7c9-x2x_1f2e3d",
				Message: "this instance is not running the owner GC (it is not the leader); the leader is nodegc-owner-5b7c9-x2x_1f2e3d"})
		case q.Get("resource") == "nosuchthing":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(ownergc.ExplainError{Leader: true, Message: `unknown resource type "nosuchthing"`})
		default:
			_ = json.NewEncoder(w).Encode(heldOwner())
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &queries
}

func TestExplainCommand(t *testing.T) {
	srv, queries := explainServer(t, true)

	code, out, errOut := runMain(t, "", "explain", "cm/owner", "-n", "web", "--server", srv.URL)
	if code != 0 {
		t.Fatalf("explain: code %d, stderr %q", code, errOut)
	}
	if diff := cmp.Diff(heldOwnerText, out); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
	want := url.Values{"resource": {"cm"}, "namespace": {"web"}, "name": {"owner"}}
	if diff := cmp.Diff(want, (*queries)[0]); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}

	code, out, errOut = runMain(t, "", "explain", "configmaps.v1.", "owner", "--namespace=web", "-o", "json", "--server", srv.URL)
	var got ownergc.Explanation
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("explain -o json: code %d, %v, stderr %q", code, err, errOut)
	}
	if diff := cmp.Diff(heldOwner(), &got); diff != "" {
		t.Errorf("JSON (-want +got):\n%s", diff)
	}
	if q := (*queries)[1]; q.Get("resource") != "configmaps.v1." || q.Get("name") != "owner" {
		t.Errorf("KIND NAME as two arguments: query %v", q)
	}

	code, _, errOut = runMain(t, "", "explain", "nosuchthing/x", "--server", srv.URL)
	if code != 1 || !strings.Contains(errOut, `unknown resource type "nosuchthing"`) {
		t.Errorf("unknown resource: code %d, stderr %q", code, errOut)
	}
	if q := (*queries)[2]; q.Get("namespace") != "default" {
		t.Errorf("without -n the namespace is %q, want default", q.Get("namespace"))
	}
}

// Not the leader: say which instance is and how to ask it, exit 1.
func TestExplainCommandNotLeader(t *testing.T) {
	srv, _ := explainServer(t, false)
	code, out, errOut := runMain(t, "", "explain", "deployment/web", "-n", "shop", "--server", srv.URL)
	if code != 1 || out != "" {
		t.Errorf("code %d, stdout %q; want 1 and nothing", code, out)
	}
	for _, want := range []string{
		"this instance is not running the owner GC (it is not the leader); the leader is nodegc-owner-5b7c9-x2x_1f2e3d",
		"kubectl exec -n nodegc nodegc-owner-5b7c9-x2x -- /nodegc explain deployment/web -n shop",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}

// An agent that refuses the client (403: not on the loopback) is not one
// that does not lead: the command prints its refusal, and no leader hint
// (review config r10 F1).
func TestExplainCommandRefused(t *testing.T) {
	const refusal = "the owner GC's debug endpoints answer clients on the loopback only: this agent's metricsBindAddress " +
		"192.0.2.2:10281 is not on the loopback"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(ownergc.ExplainError{Message: refusal})
	}))
	t.Cleanup(srv.Close)
	code, _, errOut := runMain(t, "", "explain", "cm/x", "-n", "default", "--server", srv.URL)
	if code != 1 || !strings.Contains(errOut, refusal) || strings.Contains(errOut, "leader") {
		t.Errorf("code %d, stderr %q; want 1, the refusal and no word of a leader", code, errOut)
	}
}

// Without --server the command asks the agent at the configuration's
// metricsBindAddress, on loopback when that binds every address.
func TestExplainCommandServerFromConfig(t *testing.T) {
	srv, queries := explainServer(t, true)
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for _, bind := range []string{":" + port, "0.0.0.0:" + port, "127.0.0.1:" + port} {
		file := writeFile(t, fmt.Sprintf("apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: %q\n", bind))
		n := len(*queries)
		code, _, errOut := runMain(t, "", "explain", "cm/owner", "-n", "web", "-c", file)
		if code != 0 || len(*queries) != n+1 {
			t.Errorf("metricsBindAddress %s: code %d, stderr %q, %d requests", bind, code, errOut, len(*queries)-n)
		}
	}
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: \"0\"\n")
	code, _, errOut := runMain(t, "", "explain", "cm/owner", "-c", file)
	if code != 1 || !strings.Contains(errOut, "--server") {
		t.Errorf("metricsBindAddress 0: code %d, stderr %q; want 1 and a hint to give --server", code, errOut)
	}
}

// No agent listens where explain asks (a closed port: connection
// refused): it says at which address, where that came from, and what to
// run instead, exit 1.
func TestExplainCommandNoAgent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	file := writeFile(t, fmt.Sprintf("apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n\nmetricsBindAddress: %q\n", addr))
	for name, tc := range map[string]struct {
		args   []string
		source string
	}{
		"--server":               {args: []string{"--server", "http://" + addr}, source: "(given by --server)"},
		"-c":                     {args: []string{"-c", file}, source: "(metricsBindAddress " + addr + ", line 4 of -c " + file + ")"},
		"--metrics-bind-address": {args: []string{"--metrics-bind-address", addr}, source: "(metricsBindAddress " + addr + ", from --metrics-bind-address)"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runMain(t, "", append([]string{"explain", "cm/settings", "-n", "shop"}, tc.args...)...)
			if code != 1 || out != "" {
				t.Errorf("code %d, stdout %q; want 1 and nothing", code, out)
			}
			for _, want := range []string{
				"nodegc: no nodegc agent answers at http://" + addr + " " + tc.source + ": dial tcp " + addr + ": connect: connection refused\n",
				"asks the running agent that leads the owner GC",
				// The leader's pod, whatever the release's name and mode.
				"  POD=$(kubectl get lease -n nodegc nodegc-owner-gc -o jsonpath='{.spec.holderIdentity}' | cut -d_ -f1)\n" +
					"  kubectl exec -n nodegc \"$POD\" -- /nodegc explain cm/settings -n shop -c /etc/nodegc/config.yaml\n",
			} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
		})
	}
	// Without -c, or with a file that does not set it: the default, and
	// says which.
	o := &explainOptions{}
	if got, want := o.serverSource("127.0.0.1:10281"), "metricsBindAddress 127.0.0.1:10281, the default: no -c given"; got != want {
		t.Errorf("serverSource without -c = %q, want %q", got, want)
	}
	o.config.configFile = "/etc/nodegc/config.yaml"
	if got, want := o.serverSource("127.0.0.1:10281"), "metricsBindAddress 127.0.0.1:10281, the default: -c /etc/nodegc/config.yaml does not set it"; got != want {
		t.Errorf("serverSource of a file without it = %q, want %q", got, want)
	}
}

func TestExplainCommandArgs(t *testing.T) {
	for _, args := range [][]string{{"explain"}, {"explain", "owner"}, {"explain", "cm/"}, {"explain", "cm/a", "b"}, {"explain", "a", "b", "c"}} {
		code, _, errOut := runMain(t, "", args...)
		if code != 1 || !strings.Contains(errOut, "KIND/NAME") {
			t.Errorf("%q: code %d, stderr %q; want 1 and the usage", args, code, errOut)
		}
	}
}

// TestExplainTextNamesWhatJSONSays: the text shows an owner observed under
// another name than its reference states, and the owner reference a
// blocking dependent is undecided about (which is why the owner GC does
// not delete it), as the JSON does.
func TestExplainTextNamesWhatJSONSays(t *testing.T) {
	e := heldOwner()
	e.Owners[0].ObservedName = "top-1"
	e.Dependents[0].Undecided = &ownergc.OwnerState{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", Class: "unknown",
		Reason: "owner-kind-unknown"}
	var out strings.Builder
	printExplanation(&out, e)
	for _, want := range []string{
		"Deployment web/top (uid t-1) (observed as top-1) [controller]",
		"ConfigMap web/held (uid h-1) (undecided: owner Widget w, owner-kind-unknown)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}
