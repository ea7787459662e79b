package ownergc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/config"
)

// testOwnerBackFromAnEtcdRestore: etcd is restored from a backup taken
// before an owner was deleted, while the collector runs. The owner and a
// collected dependent are back with their UIDs. kube-apiserver restarts;
// the monitor of the dependent's resource (Secrets) delivers the
// dependent before the owner's (ConfigMaps) has caught up. The dependent
// must stay: its owner exists. The collector knew the owner's absence in
// one of three ways: it saw its deletion (a tombstone, kept by another
// dependent held by its finalizer), or a lookup found nothing at its
// identity (the owner was deleted before the collector started: a virtual
// node kept by the held dependent, or, with no other dependent, the
// absent-owner cache alone). Before, the dependent was deleted again on
// that knowledge alone (all-owners-absent: owner-deleted, owner-not-found).
//
// The collector may also know the owner as deleting in the foreground,
// waiting for a blocking dependent held by its finalizer, when the backup
// was taken before that delete: the restored owner is not being deleted.
// Before, the restored dependent was deleted again from the graph's word
// (owner-deleting-in-foreground: review ownergc r10 F1), where
// kube-controller-manager reads the owner first and keeps it.
//
// The restore is of the two objects' keys: their stored bytes are read
// from etcd before the deletion and written back while kube-apiserver is
// down, through etcd's JSON gateway, as a restore with a revision bump
// leaves them (old UIDs, new revisions).
func testOwnerBackFromAnEtcdRestore(t *testing.T, env *itEnv) {
	for _, tc := range []struct {
		name       string
		watched    bool // the collector runs when the owner is deleted
		held       bool // another dependent, held by its finalizer, references the owner
		foreground bool // the owner is deleted in the foreground, and waits for the held dependent
	}{
		{name: "deletion observed", watched: true, held: true},
		{name: "found absent by a lookup", held: true},
		{name: "in the absent-owner cache"},
		{name: "deleting in the foreground", watched: true, held: true, foreground: true},
	} {
		t.Run(tc.name, func(t *testing.T) { ownerBackFromAnEtcdRestore(t, env, tc.watched, tc.held, tc.foreground) })
	}
}

func ownerBackFromAnEtcdRestore(t *testing.T, env *itEnv, watched, withHeld, foreground bool) {
	ctx := t.Context()
	ns := env.namespace(t, "restore")
	owner := env.configMap(t, ns, "owner", nil)
	secrets := env.cs.CoreV1().Secrets(ns)
	secret := func(name string, block bool, finalizers ...string) *corev1.Secret {
		s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers,
			OwnerReferences: []metav1.OwnerReference{cmRef(owner, block)}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dep := secret("dep", false)
	if withHeld {
		held := secret("held", foreground, "test.nodegc.io/hold")
		t.Cleanup(func() {
			_, _ = secrets.Patch(context.Background(), held.Name, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		})
	}
	etcd := fmt.Sprintf("http://127.0.0.1:%d", env.c.EtcdClientPort)
	ownerKey, depKey := "/registry/configmaps/"+ns+"/owner", "/registry/secrets/"+ns+"/dep"
	backup := map[string][]byte{ownerKey: etcdGet(t, etcd, ownerKey), depKey: etcdGet(t, etcd, depKey)}

	// After the restart, the ConfigMaps' relist (kube-apiserver's new
	// watch cache answers the resumed watch with 410 Gone), or the
	// namespace's ConfigMaps on their watch, wait until the dependent is
	// decided on.
	held := newConfigMapsHold(t, ns)
	var gc *testCollector
	if watched {
		gc = held.start(env)
	}
	propagation := metav1.DeletePropagationBackground
	if foreground {
		propagation = metav1.DeletePropagationForeground
	}
	env.deleteCM(t, ns, "owner", propagation)
	if !watched {
		gc = held.start(env)
	}
	eventually(t, 30*time.Second, "the dependent to be collected", gone(func(ctx context.Context) error {
		_, err := secrets.Get(ctx, "dep", metav1.GetOptions{})
		return err
	}))
	gc.waitIdle(t)
	if foreground {
		if o := env.getCM(t, ns, "owner"); o.DeletionTimestamp == nil {
			t.Fatalf("the owner does not wait for its blocking dependent: %+v", o.ObjectMeta)
		}
	}

	held.restore(env, etcd, backup, owner.UID)
	restored, err := secrets.Get(ctx, "dep", metav1.GetOptions{})
	if err != nil || restored.UID != dep.UID {
		t.Fatalf("the restored dependent: %v, %v; want uid %s", restored, err, dep.UID)
	}
	eventually(t, 30*time.Second, "the graph to observe the restored dependent, or its deletion", func(ctx context.Context) (bool, error) {
		if r := gc.current.Load(); r != nil && r.graph.hasObserved(dep.UID, restored.ResourceVersion) {
			return true, nil
		}
		_, err := secrets.Get(ctx, "dep", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if !watched {
		// The etcd writes gave the dependent a resource version past the
		// ConfigMaps' watch, which keeps a "not found" from counting for
		// ownerWatchLagBound (a real restore gives it its old one, which
		// does not): outlast it.
		time.Sleep(ownerWatchLagBound + 2*time.Second)
	}
	gc.waitIdle(t)
	if got, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || got.UID != dep.UID {
		t.Errorf("the dependent of an owner back from the restore: %v; want it kept; records %+v", err, gc.recordsFor(dep.UID))
	}
	held.release()
	gc.waitObserved(t, owner.UID, "")
	gc.waitIdle(t)
	if got, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || got.UID != dep.UID {
		t.Errorf("the dependent once the owner is observed again: %v; want it kept; records %+v", err, gc.recordsFor(dep.UID))
	}
}

// configMapsHold holds a collector's ConfigMaps monitor, once hold is set,
// until release: its feed of namespace ns's ConfigMaps and its lists.
type configMapsHold struct {
	t        *testing.T
	ns       string
	hold     atomic.Bool
	released chan struct{}
	once     sync.Once
}

func newConfigMapsHold(t *testing.T, ns string) *configMapsHold {
	h := &configMapsHold{t: t, ns: ns, released: make(chan struct{})}
	t.Cleanup(h.release)
	return h
}

func (h *configMapsHold) release() { h.once.Do(func() { close(h.released) }) }

// start starts a collector whose ConfigMaps monitor h holds.
func (h *configMapsHold) start(env *itEnv) *testCollector {
	return env.startCollector(h.t, testConfig(), func(c *Collector) {
		c.hooks.beforeFeed = func(res *resource, obj *metav1.PartialObjectMetadata) {
			if h.hold.Load() && res.gvr.Resource == "configmaps" && obj.Namespace == h.ns {
				<-h.released
			}
		}
		c.hooks.beforeList = func(res *resource) {
			if h.hold.Load() && res.gvr.Resource == "configmaps" {
				<-h.released
			}
		}
	})
}

// restore stops kube-apiserver, writes backup's keys back into the etcd at
// url, holds the collector's ConfigMaps monitor and starts kube-apiserver
// again; the ConfigMap owner of h's namespace must be back as ownerUID, not
// being deleted.
func (h *configMapsHold) restore(env *itEnv, url string, backup map[string][]byte, ownerUID types.UID) {
	t := h.t
	env.c.StopAPIServer(t)
	for k, v := range backup {
		etcdPut(t, url, k, v)
	}
	h.hold.Store(true)
	env.c.StartAPIServer(t)
	if o := env.getCM(t, h.ns, "owner"); o.DeletionTimestamp != nil || o.UID != ownerUID {
		t.Fatalf("the restored owner: %+v; want uid %s, not being deleted", o.ObjectMeta, ownerUID)
	}
}

// testOrphaningOwnerBackFromAnEtcdRestore: an owner deleted with orphan
// propagation cannot finish (a policy denies the patch of one dependent,
// protected-x, so the owner keeps its orphan finalizer and its worker
// tries again); etcd is restored from a backup taken before the delete:
// the owner is back, not being deleted, and the orphaned dependent dep is
// back with its reference. The kube-apiserver restart leaves the ConfigMaps
// monitor lagging (held here). Before, the orphan worker's next attempt,
// on the graph's stale "orphaning", stripped dep's reference to an owner
// that stays (review ownergc r10 F2; kube-controller-manager does the
// same). Now the owner is read first while its monitor lags, and dep
// keeps its reference.
func testOrphaningOwnerBackFromAnEtcdRestore(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "restoreor")
	env.denySecretUpdates(t, ns)
	owner := env.configMap(t, ns, "owner", nil)
	secrets := env.cs.CoreV1().Secrets(ns)
	secret := func(name string) *corev1.Secret {
		s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name,
			OwnerReferences: []metav1.OwnerReference{cmRef(owner, false)}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dep := secret("dep")
	secret("protected-x")
	etcd := fmt.Sprintf("http://127.0.0.1:%d", env.c.EtcdClientPort)
	ownerKey, depKey := "/registry/configmaps/"+ns+"/owner", "/registry/secrets/"+ns+"/dep"
	backup := map[string][]byte{ownerKey: etcdGet(t, etcd, ownerKey), depKey: etcdGet(t, etcd, depKey)}

	held := newConfigMapsHold(t, ns)
	gc := held.start(env)
	gc.waitObserved(t, owner.UID, "")
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationOrphan)
	eventually(t, 30*time.Second, "dep to be orphaned", func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, "dep", metav1.GetOptions{})
		return err == nil && len(s.OwnerReferences) == 0, nil
	})

	held.restore(env, etcd, backup, owner.UID)
	if s, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || s.UID != dep.UID || len(s.OwnerReferences) != 1 {
		t.Fatalf("the restored dependent: %v, %v; want uid %s with its owner reference", s, err, dep.UID)
	}
	// The orphan worker's next attempt: it reads the owner and leaves
	// the dependents (logged), or patches dep's reference away.
	const left = "Owner not orphaning its dependents as read while its resource's monitor lags"
	eventually(t, 60*time.Second, "the orphan worker's next attempt", func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, "dep", metav1.GetOptions{})
		return strings.Contains(gc.logs.String(), left) || (err == nil && len(s.OwnerReferences) == 0), nil
	})
	if s, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || len(s.OwnerReferences) != 1 {
		t.Errorf("dep, whose owner is back from the restore and not being deleted, lost its reference: %v, %+v; records %+v",
			err, s, gc.recordsFor(dep.UID))
	}
	held.release()
	gc.waitObserved(t, owner.UID, "")
	gc.waitIdle(t)
	if s, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || len(s.OwnerReferences) != 1 {
		t.Errorf("dep once the owner is observed again: %v, %+v; want its reference kept", err, s)
	}
}

// denySecretUpdates makes kube-apiserver deny, until the test ends, the
// updates (patches included) of the Secrets named protected-* in namespace
// ns, with a ValidatingAdmissionPolicy.
func (e *itEnv) denySecretUpdates(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	label := "ownergc.test.nodegc.io/deny"
	if _, err := e.cs.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+label+`":"`+ns+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ar := e.cs.AdmissionregistrationV1()
	name := "ownergc-" + ns
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!oldObject.metadata.name.startsWith('protected-')", Message: "protected by the test policy"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ar.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: ns}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ar.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	canary, err := e.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "protected-canary"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the policy to deny", func(ctx context.Context) (bool, error) {
		_, err := e.cs.CoreV1().Secrets(ns).Patch(ctx, canary.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	})
}

// etcdGet returns the value of key in the etcd at url (its JSON gateway).
func etcdGet(t *testing.T, url, key string) []byte {
	t.Helper()
	var out struct {
		KVs []struct{ Value string } `json:"kvs"`
	}
	etcdCall(t, url+"/v3/kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))}, &out)
	if len(out.KVs) != 1 {
		t.Fatalf("etcd key %s: %d values", key, len(out.KVs))
	}
	v, err := base64.StdEncoding.DecodeString(out.KVs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// etcdPut writes value at key in the etcd at url.
func etcdPut(t *testing.T, url, key string, value []byte) {
	t.Helper()
	etcdCall(t, url+"/v3/kv/put", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)}, nil)
}

func etcdCall(t *testing.T, url string, body any, out any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s", url, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// testHoldCountsEachEpisode, on kube-apiserver: an owner deleted in the
// foreground while the Secrets monitor has not synced is held; a blocking
// ConfigMap b appears and the Secrets sync, and the owner waits for b
// longer than the hold's bound. kube-apiserver restarts with the Secrets
// relist held, a blocking Secret s is made meanwhile (as an etcd restore
// would bring one back), and b goes: the owner must get a new hold and
// stay while s exists. Before, its hold was counted from the first
// episode, had expired, and the owner's finalizer went at once, the owner
// before its blocking dependent, which was then deleted as
// all-owners-absent (review ownergc r11 F1; TestHoldCountsEachEpisode is
// the same at unit level).
func testHoldCountsEachEpisode(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "hold-episode")
	owner := env.configMap(t, ns, "owner", nil)
	gate := &secretsGate{t: t}
	release := gate.hold()
	gc := env.startCollector(t, gatedHoldConfig(), gate.tweak)
	unfinalize := func(get func() error) {
		t.Cleanup(func() { _ = get() })
	}
	// The first episode: held, Secrets not synced.
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the owner's finalizer held", func(context.Context) (bool, error) {
		return strings.Contains(gc.logs.String(), "Keeping the finalizer while the graph may miss dependents"), nil
	})
	// A blocking ConfigMap appears; the owner waits for it, and the Secrets
	// sync. It waits longer than the bound.
	env.configMap(t, ns, "b", []metav1.OwnerReference{cmRef(owner, true)}, "test.nodegc.io/hold")
	unfinalize(func() error {
		_, err := env.cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), "b", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		return err
	})
	time.Sleep(holdRecheck + time.Second) // the owner's worker looks again and sees b
	release()
	time.Sleep(gatedHoldBound + 5*time.Second)
	if o := env.getCM(t, ns, "owner"); o.DeletionTimestamp == nil {
		t.Fatal("the owner went while its blocking dependent b exists")
	}
	// The second episode: kube-apiserver restarts with the Secrets relist
	// held; a blocking Secret is made; b goes.
	release = gate.hold()
	env.c.StopAPIServer(t)
	env.c.StartAPIServer(t)
	s, err := env.cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s",
		Finalizers: []string{"test.nodegc.io/hold"}, OwnerReferences: []metav1.OwnerReference{cmRef(owner, true)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unfinalize(func() error {
		_, err := env.cs.CoreV1().Secrets(ns).Patch(context.Background(), s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		return err
	})
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Patch(ctx, "b", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if gone, _ := env.cmGone(ns, "owner")(ctx); gone {
		t.Errorf("the owner went 5 s after b while its blocking Secret s exists (the Secrets relist held); records %+v", gc.recordsFor(owner.UID))
	}
	release()
	gc.waitIdle(t)
	if gone, _ := env.cmGone(ns, "owner")(ctx); gone {
		t.Errorf("the owner went while its blocking Secret s exists (the Secrets relist applied)")
	}
	if _, err := env.cs.CoreV1().Secrets(ns).Get(ctx, "s", metav1.GetOptions{}); err != nil {
		t.Errorf("the blocking Secret s: %v; want it kept", err)
	}
}

// gatedHoldBound is the hold's bound of the tests that hold the Secrets'
// lists (secretsGate, gatedHoldConfig).
const gatedHoldBound = 15 * time.Second

// gatedHoldConfig is testConfig with holds bounded by gatedHoldBound.
func gatedHoldConfig() config.OwnerGCConfiguration {
	cfg := testConfig()
	cfg.UnsyncedResourceHold = &metav1.Duration{Duration: gatedHoldBound}
	return cfg
}

// secretsGate makes a collector's lists of Secrets wait while held.
type secretsGate struct {
	t *testing.T
	p atomic.Pointer[chan struct{}]
}

// hold makes the lists wait until the release it returns is called (at
// the latest when the test ends).
func (g *secretsGate) hold() (release func()) {
	ch := make(chan struct{})
	g.p.Store(&ch)
	var once sync.Once
	release = func() { once.Do(func() { g.p.Store(nil); close(ch) }) }
	g.t.Cleanup(release)
	return release
}

// tweak is the startCollector tweak that gates the collector's lists.
func (g *secretsGate) tweak(c *Collector) {
	c.hooks.beforeList = func(res *resource) {
		if p := g.p.Load(); p != nil && res.gvr.Resource == "secrets" {
			<-*p
		}
	}
}

// testHoldEndsWithItsDeletion, on kube-apiserver: an owner kept by a
// finalizer of another controller is deleted in the foreground while the
// Secrets monitor has not synced, and held; the operator removes its
// foregroundDeletion finalizer by hand, and the Secrets sync. Longer than
// the bound later, kube-apiserver restarts with the Secrets relist held, a
// blocking Secret s is made, and the owner is deleted in the foreground
// again: it must get a new hold and keep its finalizer while s exists.
// Before, the first deletion's hold outlived it, the new deletion was
// measured from it, and the finalizer went at once (review ownergc r12 F1;
// TestHoldEndsWithItsDeletion is the same at unit level).
func testHoldEndsWithItsDeletion(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "hold-ends")
	owner := env.configMap(t, ns, "owner", nil, "test.nodegc.io/hold")
	cms, secrets := env.cs.CoreV1().ConfigMaps(ns), env.cs.CoreV1().Secrets(ns)
	t.Cleanup(func() {
		_, _ = cms.Patch(context.Background(), "owner", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	gate := &secretsGate{t: t}
	release := gate.hold()
	gc := env.startCollector(t, gatedHoldConfig(), gate.tweak)
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)
	eventually(t, 30*time.Second, "the owner's finalizer held", func(context.Context) (bool, error) {
		return strings.Contains(gc.logs.String(), "Keeping the finalizer while the graph may miss dependents"), nil
	})
	if _, err := cms.Patch(ctx, "owner", types.MergePatchType, []byte(`{"metadata":{"finalizers":["test.nodegc.io/hold"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	release()
	time.Sleep(gatedHoldBound + 5*time.Second)

	release = gate.hold()
	env.c.StopAPIServer(t)
	env.c.StartAPIServer(t)
	s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s",
		Finalizers: []string{"test.nodegc.io/hold"}, OwnerReferences: []metav1.OwnerReference{cmRef(owner, true)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = secrets.Patch(context.Background(), s.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	env.deleteCM(t, ns, "owner", metav1.DeletePropagationForeground)
	time.Sleep(5 * time.Second)
	if o := env.getCM(t, ns, "owner"); !slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Errorf("foregroundDeletion removed 5 s after the second foreground delete while the blocking Secret s exists "+
			"(the Secrets relist held): finalizers %v; records %+v", o.Finalizers, gc.recordsFor(owner.UID))
	}
	release()
}
