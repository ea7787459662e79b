package ownergc

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The answers of kube-apiserver (1.34) to refused writes, as it sends them.
var (
	// A JSON patch whose test operation failed: 422 Invalid, a generic
	// message and no details.
	answerPatchTestFailed = metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid, Message: "the server rejected our request due to an error in our request",
		Details: &metav1.StatusDetails{}}
	// A delete whose resourceVersion precondition failed.
	answerPreconditionFailed = metav1.Status{Status: metav1.StatusFailure, Code: http.StatusConflict,
		Reason: metav1.StatusReasonConflict, Message: `Operation cannot be fulfilled on configmaps "d": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (2). The object might have been modified`,
		Details: &metav1.StatusDetails{Name: "d", Kind: "configmaps"}}
)

// answerPolicyDenied is a ValidatingAdmissionPolicy's denial of a write of
// ConfigMap name: 422 Invalid, naming the object and the policy.
func answerPolicyDenied(name string) metav1.Status {
	denied := "ValidatingAdmissionPolicy 'protect' with binding 'protect' denied request: protected by policy"
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: fmt.Sprintf("configmaps %q is forbidden: %s", name, denied),
		Details: &metav1.StatusDetails{Name: name, Kind: "configmaps", Causes: []metav1.StatusCause{{Message: denied}}}}
}

// TestStale: a write counts as refused because the object changed only on
// a DELETE's failed precondition (a 409 that a GET showed to be one:
// errChanged) or a JSON patch whose test failed. A 409 alone is not (a
// webhook may deny with 409; see TestConflictDeniedIsAnError), and every
// other 422 is an error: an admission policy's or a webhook's denial, a
// validation error, or an answer client-go could not decode.
func TestStale(t *testing.T) {
	statusErr := func(s metav1.Status) error { return &apierrors.StatusError{ErrStatus: s} }
	webhook := metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
		Message: `admission webhook "deny.example.com" denied the request: the server rejected our request due to an error in our request`}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "example.com", Kind: "Widget"}, "w", nil)
	undecoded := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, http.MethodPatch,
		schema.GroupResource{Resource: "configmaps"}, "d", "not a Status", 0, true)
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"a failed precondition (409), a GET showed": {err: fmt.Errorf("%w: %w", errChanged, statusErr(answerPreconditionFailed)), want: true},
		"a 409 alone":                                   {err: statusErr(answerPreconditionFailed)},
		"a webhook's denial (409)":                      {err: statusErr(answerWebhookConflict("d"))},
		"a JSON patch whose test failed (422)":          {err: statusErr(answerPatchTestFailed), want: true},
		"the same without details":                      {err: statusErr(metav1.Status{Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: answerPatchTestFailed.Message}), want: true},
		"wrapped":                                       {err: fmt.Errorf("patch: %w", statusErr(answerPatchTestFailed)), want: true},
		"an admission policy's denial (422)":            {err: statusErr(answerPolicyDenied("d"))},
		"a webhook's denial (422)":                      {err: statusErr(webhook)},
		"a validation error (422)":                      {err: invalid},
		"a 422 whose answer client-go could not decode": {err: undecoded},
		"forbidden (403)":                               {err: apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "d", fmt.Errorf("no"))},
		"not found (404)":                               {err: apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "d")},
		"no API error":                                  {err: io.EOF},
	} {
		if got := stale(tc.err); got != tc.want {
			t.Errorf("%s: stale(%v) = %t, want %t", name, tc.err, got, tc.want)
		}
	}
}

// rejectServer is an API server of ConfigMaps and Pods (one set of names
// for both) in namespace "reject" that refuses the writes of the names
// given to refuse: a DELETE or a PATCH of such an object gets the answer
// set for its name, a GET the object set for its name. Writes of the names
// given to accept succeed. It counts the requests by method and name.
type rejectServer struct {
	*httptest.Server
	mu       sync.Mutex
	answers  map[string]metav1.Status
	objects  map[string]*metav1.PartialObjectMetadata
	requests map[string]int // "METHOD name"
}

const rejectNamespace = "reject"

func newRejectServer(t *testing.T) *rejectServer {
	t.Helper()
	s := &rejectServer{answers: map[string]metav1.Status{}, objects: map[string]*metav1.PartialObjectMetadata{}, requests: map[string]int{}}
	prefix := "/api/v1/namespaces/" + rejectNamespace + "/"
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		name, ok := strings.CutPrefix(req.URL.Path, prefix+"configmaps/")
		if !ok {
			name, ok = strings.CutPrefix(req.URL.Path, prefix+"pods/")
		}
		if !ok {
			http.Error(w, "not a ConfigMap or Pod in "+rejectNamespace, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.requests[req.Method+" "+name]++
		answer, refuse := s.answers[name]
		obj := s.objects[name]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == http.MethodGet && obj != nil:
			_ = json.NewEncoder(w).Encode(obj)
		case (req.Method == http.MethodDelete || req.Method == http.MethodPatch) && refuse:
			answer.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
			w.WriteHeader(int(answer.Code))
			_ = json.NewEncoder(w).Encode(answer)
		case req.Method == http.MethodDelete && obj != nil:
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusSuccess})
		case req.Method == http.MethodPatch && obj != nil:
			_ = json.NewEncoder(w).Encode(obj) // the patch is not applied: the tests look at what was sent
		default:
			http.Error(w, "unexpected "+req.Method+" of "+name, http.StatusBadRequest)
		}
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// refuse makes the server answer every write of name with answer, and a
// GET with obj (the object as it is now).
func (s *rejectServer) refuse(name string, answer metav1.Status, obj *metav1.PartialObjectMetadata) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers[name] = answer
	if obj != nil {
		obj = obj.DeepCopy()
		obj.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
		s.objects[name] = obj
	}
}

// accept makes the server take every write of name, refused until now:
// a DELETE answers Success, a PATCH the object as refuse set it.
func (s *rejectServer) accept(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.answers, name)
}

func (s *rejectServer) count(method, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[method+" "+name]
}

// rejectRun is a run whose clients reach s (through the transport
// wrappers wraps, such as a fence), logging into logs and counting into
// reg, with the ConfigMaps and Pods of the graph tg.
func rejectRun(t *testing.T, s *rejectServer, wraps ...func(http.RoundTripper) http.RoundTripper) (r *run, tg *testGraph,
	reg *prometheus.Registry, logs *syncBuffer) {
	t.Helper()
	reg, logs = prometheus.NewRegistry(), &syncBuffer{}
	c := &Collector{requestTimeout: 10 * time.Second, workers: 1, clock: clock.RealClock{}}
	c.metrics = newMetrics(reg, c)
	rc := &rest.Config{Host: s.URL, BearerToken: "token", QPS: -1, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	for _, w := range wraps {
		rc.Wrap(w)
	}
	var err error
	if c.writes, err = newMetaClient(rc); err != nil {
		t.Fatal(err)
	}
	if c.metadata, err = metadata.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs), textlogger.Verbosity(4)))
	r = newRun(klog.NewContext(t.Context(), logger), c)
	t.Cleanup(func() {
		r.deletes.ShutDown()
		r.orphans.ShutDown()
		if t.Failed() {
			t.Logf("--- the run's log ---\n%s", logs.tail(40))
		}
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("Pod"), meta.RESTScopeNamespace)
	r.snapshot.Store(&discoverySnapshot{mapper: mapper})
	tg = newTestGraph(t)
	tg.g, tg.b.g = r.graph, r.graph
	tg.b.initial = false
	tg.b.endHold = r.holds.drop
	return r, tg, reg, logs
}

// deniedWrite is one write of deniedWrites: the object it is for, how to
// attempt it, and the action it records.
type deniedWrite struct {
	name   string
	act    func() outcome
	action actionKind
}

// deniedWrites puts into r's graph (through tg) the objects whose writes
// the refused-writes tests have s refuse with answer(name), plus extra, and
// returns the four writes: a delete (delete-denied, whose owner is gone),
// a patch removing a dangling reference (patch-denied), a finalizer's
// removal (fg-denied) and an orphaning patch (orphan-denied).
func deniedWrites(t *testing.T, r *run, tg *testGraph, s *rejectServer, answer func(string) metav1.Status, extra ...*metav1.PartialObjectMetadata) []deniedWrite {
	t.Helper()
	ns := rejectNamespace
	owner := object(ns, "owner", "owner")
	live := object(ns, "live", "live")
	denied := []*metav1.PartialObjectMetadata{
		object(ns, "delete-denied", "delete-denied", ownedBy(resConfigMap, "owner", "owner", true)),
		object(ns, "patch-denied", "patch-denied", ownedBy(resConfigMap, "live", "live", false), ownedBy(resConfigMap, "owner", "owner", false)),
		object(ns, "fg-denied", "fg-denied", deleting(), withFinalizers(metav1.FinalizerDeleteDependents)),
		object(ns, "orphan-denied", "orphan-denied", ownedBy(resConfigMap, "live", "live", false)),
	}
	for _, o := range append(append([]*metav1.PartialObjectMetadata{owner, live}, denied...), extra...) {
		tg.apply(upsert(resConfigMap, o))
	}
	tg.apply(del(resConfigMap, owner)) // the dependents' owner is gone
	for _, o := range denied {
		s.refuse(o.Name, answer(o.Name), o)
	}
	return []deniedWrite{
		{name: "delete-denied", act: func() outcome { return processItem(t, r, "delete-denied") }, action: actDelete},
		{name: "patch-denied", act: func() outcome { return processItem(t, r, "patch-denied") }, action: actRemoveRefs},
		{name: "fg-denied", action: actRemoveFinalizer, act: func() outcome {
			return r.removeFinalizer(t.Context(), nodeID(r.graph.nodes["fg-denied"]), metav1.FinalizerDeleteDependents, 0, ruleNoBlocking)
		}},
		{name: "orphan-denied", action: actOrphanDependent, act: func() outcome {
			err := r.orphanDependent(t.Context(), objectID{uid: "live", apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: "live"},
				orphanDependent{id: nodeID(r.graph.nodes["orphan-denied"]), indexes: []int{0}})
			if err == nil {
				return done
			}
			return retry
		}},
	}
}

// processItem decides about the graph's item name and acts, as a worker.
func processItem(t *testing.T, r *run, name string) outcome {
	t.Helper()
	v, ok := r.graph.itemView(types.UID(name))
	if !ok {
		t.Fatalf("%s not in the graph", name)
	}
	return r.process(t.Context(), &v, true)
}

// TestRefusedWrites: a write the API server refuses for another reason
// than a changed object (here a ValidatingAdmissionPolicy's 422) is an
// action error: counted by action, logged as an error with the object and
// the server's message, and retried with the item's backoff, without
// re-reading the object. A JSON patch whose test failed is the object
// having changed: it re-reads the object and decides once more, and counts
// no error.
func TestRefusedWrites(t *testing.T) {
	s := newRejectServer(t)
	r, tg, reg, logs := rejectRun(t, s)
	ns := rejectNamespace
	patchStale := object(ns, "patch-stale", "patch-stale", ownedBy(resConfigMap, "live", "live", false), ownedBy(resConfigMap, "owner", "owner", false))
	writes := deniedWrites(t, r, tg, s, answerPolicyDenied, patchStale)
	s.refuse("patch-stale", answerPatchTestFailed, patchStale)
	for _, tc := range writes {
		before := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()]
		out := tc.act()
		failed := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()] - before
		if out != retry || failed != 1 || s.count(http.MethodGet, tc.name) != 0 {
			t.Errorf("%s, denied by a policy: outcome %+v, %v action errors %v, %d GETs; want a retry with backoff, 1 error, no GET",
				tc.name, out, tc.action, failed, s.count(http.MethodGet, tc.name))
		}
		// orphanDependent returns its error; orphanDependents logs it.
		if tc.action != actOrphanDependent && !errorLogged(logs, tc.name, "ValidatingAdmissionPolicy 'protect' with binding 'protect' denied request") {
			t.Errorf("%s, denied by a policy: no error logged with the object and the policy's message", tc.name)
		}
	}

	// The JSON patch whose test failed: the object changed. It is read
	// again and decided once more (the same patch, refused the same way),
	// then retried, and no error is counted or logged.
	out := processItem(t, r, "patch-stale")
	if got := s.count(http.MethodGet, "patch-stale"); out != retry || got != 1 || s.count(http.MethodPatch, "patch-stale") != 2 {
		t.Errorf("patch-stale: outcome %+v, %d GETs, %d PATCHes; want a retry after one re-read and a second patch", out, got, s.count(http.MethodPatch, "patch-stale"))
	}
	if got := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[actRemoveRefs.String()]; got != 1 {
		t.Errorf("remove-owner-references errors = %v, want only patch-denied's", got)
	}
	if errorLogged(logs, "patch-stale") {
		t.Error("patch-stale: an error logged for an object that changed")
	}
}

// errorLogged reports whether an error line of logs holds every one of
// texts.
func errorLogged(logs *syncBuffer, texts ...string) bool {
	for line := range strings.SplitSeq(logs.tail(1000), "\n") {
		if !strings.HasPrefix(line, "E") {
			continue
		}
		found := true
		for _, text := range texts {
			found = found && strings.Contains(line, text)
		}
		if found {
			return true
		}
	}
	return false
}

// waitDeniedReported waits until the collector has counted a denied
// delete and a denied reference removal as action errors, and logged an
// error line for each of protected-d and protected-p with message. The
// worker counts an error before its caller logs it, so the two are waited
// for together: a check of the log right after the counters went up may
// come before the line.
func waitDeniedReported(t *testing.T, gc *testCollector, message string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("the denied delete and patch to count as action errors, each logged with %q", message),
		func(context.Context) (bool, error) {
			failed := counterByLabel(t, gc.reg, "nodegc_owner_gc_action_errors_total", "action")
			if failed[actDelete.String()] < 1 || failed[actRemoveRefs.String()] < 1 {
				return false, fmt.Errorf("action errors %v", failed)
			}
			for _, obj := range []string{"protected-d", "protected-p"} {
				if !errorLogged(gc.logs, obj, message) {
					return false, fmt.Errorf("no error logged for %s", obj)
				}
			}
			return true, nil
		})
}

// testRefusedWrites: against kube-apiserver, a JSON patch whose test fails
// is answered as patchTestFailed expects (stale), and a
// ValidatingAdmissionPolicy's denial of a DELETE or a patch is not. The
// collector reports such denials (action errors by action, an error log
// line with the object and the policy's message) and retries them, and
// collects the objects once the policy no longer applies.
func testRefusedWrites(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "refused")
	label := "ownergc.test.nodegc.io/deny"
	patch := []byte(`{"metadata":{"labels":{"` + label + `":"` + ns + `"}}}`)
	if _, err := env.cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The policy denies deleting and updating the ConfigMaps named
	// protected-* in this namespace.
	ar := env.cs.AdmissionregistrationV1()
	name := "ownergc-" + ns
	_, err := ar.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!oldObject.metadata.name.startsWith('protected-')", Message: "protected by the test policy"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ar.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	bindings := ar.ValidatingAdmissionPolicyBindings()
	_, err = bindings.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: ns}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bindings.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	canary := env.configMap(t, ns, "protected-canary", nil)
	eventually(t, 30*time.Second, "the policy to deny", func(ctx context.Context) (bool, error) {
		err := env.cs.CoreV1().ConfigMaps(ns).Delete(ctx, canary.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), nil
	})

	gc := env.startCollector(t, testConfig())
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	plain := env.configMap(t, ns, "plain", nil)
	testUID := func(uid types.UID) []byte {
		return []byte(`[{"op":"test","path":"/metadata/uid","value":"` + string(uid) + `"},` +
			`{"op":"add","path":"/metadata/labels","value":{"touched":"yes"}}]`)
	}
	_, err = gc.metadata.Resource(cms).Namespace(ns).Patch(ctx, plain.Name, types.JSONPatchType, testUID("not-"+plain.UID), metav1.PatchOptions{})
	if !stale(err) {
		t.Errorf("a JSON patch whose test fails: %#v; want it taken as stale", err)
	}
	t.Logf("a JSON patch whose test fails: %v", err)
	_, err = gc.metadata.Resource(cms).Namespace(ns).Patch(ctx, canary.Name, types.JSONPatchType, testUID(canary.UID), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || stale(err) {
		t.Errorf("a JSON patch the policy denies: %v; want a 422 not taken as stale", err)
	}
	err = gc.writes.delete(ctx, cms, ns, canary.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &canary.UID, ResourceVersion: &canary.ResourceVersion}})
	if !apierrors.IsInvalid(err) || stale(err) {
		t.Errorf("a DELETE the policy denies: %v; want a 422 not taken as stale", err)
	}
	t.Logf("a write the policy denies: %v", err)

	owner := env.configMap(t, ns, "owner", nil)
	keep := env.configMap(t, ns, "keep", nil)
	env.configMap(t, ns, "protected-d", []metav1.OwnerReference{cmRef(owner, false)})
	env.configMap(t, ns, "protected-p", []metav1.OwnerReference{cmRef(keep, false), cmRef(owner, false)})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	waitDeniedReported(t, gc, "protected by the test policy")

	if err := bindings.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "protected-d to be collected once the policy no longer applies", env.cmGone(ns, "protected-d"))
	eventually(t, 60*time.Second, "protected-p to lose the dangling reference", func(ctx context.Context) (bool, error) {
		got, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "protected-p", metav1.GetOptions{})
		return err == nil && len(got.OwnerReferences) == 1 && got.OwnerReferences[0].UID == keep.UID, err
	})
}

// answerWebhookConflict is an admission webhook's denial of a write of
// ConfigMap name with code 409 ("in use": some webhooks deny so), which
// kube-apiserver passes on: a Conflict, although no precondition failed.
func answerWebhookConflict(name string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict,
		Message: fmt.Sprintf("configmaps %q is in use", name)}
}

// TestConflictDeniedIsAnError: a write answered 409 Conflict counts as
// refused because the object changed only when it did: a DELETE whose
// preconditions failed, which a GET tells (the object has another
// resourceVersion than the DELETE stated, or is gone). The collector's
// patches carry no precondition that answers 409 (their tests answer
// 422). So an admission webhook that denies a write with 409 ("in use") is
// an action error, as a 422 denial is: counted, logged at error level with
// the webhook's message, and retried with the item's backoff, at the cost
// of one GET for a DELETE and none for a patch. A DELETE whose
// resourceVersion precondition did fail is still taken for a changed
// object: read again and decided once more, no error. Before, every 409
// was taken for a changed object: no error counted or logged, and a denied
// DELETE was sent four times per attempt, with three GETs.
func TestConflictDeniedIsAnError(t *testing.T) {
	s := newRejectServer(t)
	r, tg, reg, logs := rejectRun(t, s)
	ns := rejectNamespace
	// changed: the graph saw it owned by the deleted owner at
	// resourceVersion 1; it is at 2 now, owned by live.
	changed := object(ns, "changed", "changed", ownedBy(resConfigMap, "owner", "owner", false))
	writes := deniedWrites(t, r, tg, s, answerWebhookConflict, changed)
	s.refuse("changed", answerPreconditionFailed, object(ns, "changed", "changed", withRV("2"), ownedBy(resConfigMap, "live", "live", false)))
	for _, tc := range writes {
		method, gets := http.MethodPatch, 0
		if tc.action == actDelete {
			method, gets = http.MethodDelete, 1
		}
		before := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()]
		out := tc.act()
		failed := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()] - before
		if out != retry || failed != 1 || s.count(method, tc.name) != 1 || s.count(http.MethodGet, tc.name) != gets {
			t.Errorf("%s, denied by a webhook with 409: outcome %+v, %v action errors %v, %d %s, %d GETs; want a retry with "+
				"backoff, 1 error, 1 %s, %d GETs", tc.name, out, tc.action, failed, s.count(method, tc.name), method,
				s.count(http.MethodGet, tc.name), method, gets)
		}
		// orphanDependent returns its error; orphanDependents logs it.
		if tc.action != actOrphanDependent && !errorLogged(logs, tc.name, "is in use") {
			t.Errorf("%s, denied by a webhook with 409: no error logged with the object and the webhook's message", tc.name)
		}
	}

	// The failed precondition: read again (once to tell, once to decide
	// again), kept for its live owner, no error.
	if out := processItem(t, r, "changed"); out != done || s.count(http.MethodDelete, "changed") != 1 || s.count(http.MethodGet, "changed") != 2 {
		t.Errorf("changed: outcome %+v, %d DELETEs, %d GETs; want done (kept) after one DELETE and two GETs", out,
			s.count(http.MethodDelete, "changed"), s.count(http.MethodGet, "changed"))
	}
	if got := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[actDelete.String()]; got != 1 {
		t.Errorf("delete errors = %v, want only delete-denied's", got)
	}
	if errorLogged(logs, "reject/changed") {
		t.Error("changed: an error logged for an object that changed")
	}
}

// testWebhookConflictIsAnError: against kube-apiserver, an admission
// webhook denies the owner GC's delete of protected-d and its patch of
// protected-p (dropping a reference to a deleted owner) with 409 Conflict.
// Both are action errors, logged with the webhook's message, and retried;
// once the webhook is gone, protected-d is collected and protected-p loses
// the dangling reference. Before, the 409s were taken for objects that
// changed: nothing counted, nothing logged, the writes retried in silence.
func testWebhookConflictIsAnError(t *testing.T, env *itEnv) {
	ns := env.namespace(t, "webhook409")
	_, removeWebhook := env.denyWrites(t, ns, answerWebhookConflict)
	gc := env.startCollector(t, testConfig())
	owner := env.configMap(t, ns, "owner", nil)
	keep := env.configMap(t, ns, "keep", nil)
	env.configMap(t, ns, "protected-d", []metav1.OwnerReference{cmRef(owner, false)})
	p := env.configMap(t, ns, "protected-p", []metav1.OwnerReference{cmRef(keep, false), cmRef(owner, false)})
	gc.waitObserved(t, p.UID, p.ResourceVersion)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationBackground)
	waitDeniedReported(t, gc, "is in use")

	removeWebhook()
	eventually(t, 60*time.Second, "protected-d to be collected once the webhook is gone", env.cmGone(ns, "protected-d"))
	eventually(t, 60*time.Second, "protected-p to lose the dangling reference", func(ctx context.Context) (bool, error) {
		got, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "protected-p", metav1.GetOptions{})
		return err == nil && len(got.OwnerReferences) == 1 && got.OwnerReferences[0].UID == keep.UID, err
	})
}

// TestNoResourceVersionRereadFirst: an object its API server gives
// without a resourceVersion (an aggregated API server of its own storage
// may) is read before the owner GC deletes it or patches its references:
// such a write can be conditioned on its UID only, not on the version the
// decision saw, and the graph may lag. A new owner the graph has not seen
// yet keeps it; unchanged, it is deleted (or its dangling reference
// removed) after the read. Before, it was deleted on the graph's view with
// the UID precondition alone, new owner or not.
func TestNoResourceVersionRereadFirst(t *testing.T) {
	s := newRejectServer(t)
	r, tg, _, _ := rejectRun(t, s)
	ns := rejectNamespace
	owner := object(ns, "owner", "owner")
	live := object(ns, "live", "live")
	adopted := object(ns, "adopted", "adopted", withRV(""), ownedBy(resConfigMap, "owner", "owner", false))
	orphan := object(ns, "orphan", "orphan", withRV(""), ownedBy(resConfigMap, "owner", "owner", false))
	both := object(ns, "both", "both", withRV(""), ownedBy(resConfigMap, "live", "live", false), ownedBy(resConfigMap, "owner", "owner", false))
	tg.apply(upsert(resConfigMap, owner), upsert(resConfigMap, live), upsert(resConfigMap, adopted), upsert(resConfigMap, orphan),
		upsert(resConfigMap, both), del(resConfigMap, owner))
	// adopted has a live owner now, which the graph has not seen.
	s.refuse("adopted", answerPolicyDenied("adopted"), object(ns, "adopted", "adopted", withRV(""),
		ownedBy(resConfigMap, "owner", "owner", false), ownedBy(resConfigMap, "live", "live", false)))
	s.refuse("orphan", answerPolicyDenied("orphan"), orphan)
	s.refuse("both", answerPolicyDenied("both"), both)
	for _, name := range []string{"adopted", "orphan", "both"} {
		s.accept(name)
	}

	if out := processItem(t, r, "adopted"); s.count(http.MethodGet, "adopted") != 1 || s.count(http.MethodDelete, "adopted") != 0 {
		t.Errorf("adopted: outcome %+v, %d GETs, %d DELETEs; want it read, and kept for its new owner",
			out, s.count(http.MethodGet, "adopted"), s.count(http.MethodDelete, "adopted"))
	}
	if out := processItem(t, r, "orphan"); out != done || s.count(http.MethodGet, "orphan") != 1 || s.count(http.MethodDelete, "orphan") != 1 {
		t.Errorf("orphan: outcome %+v, %d GETs, %d DELETEs; want it read, then deleted",
			out, s.count(http.MethodGet, "orphan"), s.count(http.MethodDelete, "orphan"))
	}
	if out := processItem(t, r, "both"); out != done || s.count(http.MethodGet, "both") != 1 || s.count(http.MethodPatch, "both") != 1 {
		t.Errorf("both: outcome %+v, %d GETs, %d PATCHes; want it read, then its dangling reference removed",
			out, s.count(http.MethodGet, "both"), s.count(http.MethodPatch, "both"))
	}
}

// answerWebhookNotFound is an admission webhook's denial of a write of
// ConfigMap name with a 404 of its own (the NotFound of the webhook's
// lookup of a companion object of the same name): kube-apiserver passes a
// webhook's Status through as the webhook wrote it, code, reason and
// details included.
func answerWebhookNotFound(name string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf(`admission webhook "guard.example.com" denied the request: companions %q not found`, name),
		Details: &metav1.StatusDetails{Name: name, Kind: "configmaps"}}
}

// TestWriteNotFoundIsNoProof: a write answered with a 404 that names the
// object does not show that the object is gone: an admission webhook may
// deny the write that way. Only a GET, which no admission webhook sees,
// does. Before, the object was forgotten on the write's 404: its
// dependents then had a deleted owner and were deleted, and a foreground
// owner stopped waiting for it, while it existed. Now the write's 404 is
// checked with a GET: the object is there, so the write is an action error,
// retried with backoff, and the graph keeps it.
func TestWriteNotFoundIsNoProof(t *testing.T) {
	s := newRejectServer(t)
	r, tg, reg, _ := rejectRun(t, s)
	for _, tc := range deniedWrites(t, r, tg, s, answerWebhookNotFound) {
		before := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()]
		out := tc.act()
		failed := counterByLabel(t, reg, "nodegc_owner_gc_action_errors_total", "action")[tc.action.String()] - before
		var forgotten bool
		if n := r.events.len(); n > 0 {
			evs, _ := r.events.pop(nil, n)
			for _, ev := range evs {
				forgotten = forgotten || ev.typ == evDelete && ev.obj.GetUID() == types.UID(tc.name)
			}
		}
		if out != retry || failed != 1 || forgotten || s.count(http.MethodGet, tc.name) != 1 {
			t.Errorf("%s, denied by a webhook with a 404: outcome %+v, %v action errors %v, forgotten %t, %d GETs; want a retry with backoff, 1 error, kept, 1 GET",
				tc.name, out, tc.action, failed, forgotten, s.count(http.MethodGet, tc.name))
		}
	}
}

// denyingWebhook is a validating admission webhook that denies the
// deletes and updates of the ConfigMaps named protected-* in namespace ns
// with answer(name), and counts them.
type denyingWebhook struct {
	*httptest.Server
	ns     string
	answer func(name string) metav1.Status
	denied atomic.Int64
}

// denyWrites starts a denyingWebhook for namespace ns and registers it with
// kube-apiserver until the test ends (or remove is called), once the API
// server answers a dry-run delete of protected-canary as it denies.
func (e *itEnv) denyWrites(t *testing.T, ns string, answer func(name string) metav1.Status) (wh *denyingWebhook, remove func()) {
	t.Helper()
	ctx := t.Context()
	wh = &denyingWebhook{ns: ns, answer: answer}
	wh.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if review.Request.Namespace == wh.ns && strings.HasPrefix(review.Request.Name, "protected-") {
			status := wh.answer(review.Request.Name)
			resp.Allowed, resp.Result = false, &status
			wh.denied.Add(1)
		}
		review.Response, review.Request = resp, nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	t.Cleanup(wh.Close)
	caBundle := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: wh.Certificate().Raw})
	ar := e.cs.AdmissionregistrationV1()
	name := "ownergc-" + ns
	_, err := ar.ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "guard.example.com",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL + "/validate"), CABundle: caBundle},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore), // other tests' writes never wait on it
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	remove = func() {
		_ = ar.ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(remove)
	canary := e.configMap(t, ns, "protected-canary", nil)
	code := answer(canary.Name).Code
	eventually(t, 30*time.Second, fmt.Sprintf("the webhook to deny with %d", code), func(ctx context.Context) (bool, error) {
		err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, canary.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		var status apierrors.APIStatus
		return errors.As(err, &status) && status.Status().Code == code, nil
	})
	return wh, remove
}

// testWebhookNotFoundIsNoProof: against kube-apiserver, an admission
// webhook denies the owner GC's writes of protected-x with a 404 naming
// protected-x, which kube-apiserver passes on as written. protected-x
// exists, with a live owner (keep) and a deleted one (gone); g is owned by
// protected-x. The owner GC's patch to drop the reference to gone is denied
// that way. Before, the 404 made the collector forget protected-x, so g's
// owner counted as deleted and g was deleted. Now the write's 404 is
// checked with a GET (which no webhook sees): the patch is an action error,
// retried, and g stays; once the webhook lets the write through, the
// reference is removed.
func testWebhookNotFoundIsNoProof(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "webhook404")
	wh, removeWebhook := env.denyWrites(t, ns, answerWebhookNotFound)

	gc := env.startCollector(t, testConfig())
	keep := env.configMap(t, ns, "keep", nil)
	gone := env.configMap(t, ns, "gone", nil)
	x := env.configMap(t, ns, "protected-x", []metav1.OwnerReference{cmRef(keep, false), cmRef(gone, false)})
	g := env.configMap(t, ns, "g", []metav1.OwnerReference{cmRef(x, true)})
	gc.waitObserved(t, g.UID, g.ResourceVersion)
	denied := wh.denied.Load()
	env.deleteCM(t, ns, "gone", metav1.DeletePropagationBackground)
	gDeleted := env.cmGone(ns, "g")
	eventually(t, 30*time.Second, "two denied patches of protected-x (the first and a retry), or g deleted", func(ctx context.Context) (bool, error) {
		deleted, err := gDeleted(ctx)
		return deleted || wh.denied.Load() >= denied+2, err
	})
	if deleted, _ := gDeleted(ctx); deleted {
		t.Fatalf("g deleted, owned by protected-x which exists (%d denied writes of protected-x)", wh.denied.Load()-denied)
	}
	if !errorLogged(gc.logs, "protected-x", "yet a GET finds the object") {
		t.Error("no error logged for protected-x saying the 404 was not the object's")
	}

	removeWebhook()
	eventually(t, 60*time.Second, "protected-x to lose the reference to gone once the webhook is gone", func(ctx context.Context) (bool, error) {
		got, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "protected-x", metav1.GetOptions{})
		return err == nil && len(got.OwnerReferences) == 1 && got.OwnerReferences[0].UID == keep.UID, err
	})
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, "g", metav1.GetOptions{}); err != nil {
		t.Errorf("g after protected-x lost its dangling reference: %v", err)
	}
}
