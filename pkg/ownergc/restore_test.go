package ownergc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	var hold atomic.Bool
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	start := func() *testCollector {
		return env.startCollector(t, testConfig(), func(c *Collector) {
			c.hooks.beforeFeed = func(res *resource, obj *metav1.PartialObjectMetadata) {
				if hold.Load() && res.gvr.Resource == "configmaps" && obj.Namespace == ns {
					<-release
				}
			}
			c.hooks.beforeList = func(res *resource) {
				if hold.Load() && res.gvr.Resource == "configmaps" {
					<-release
				}
			}
		})
	}
	var gc *testCollector
	if watched {
		gc = start()
	}
	propagation := metav1.DeletePropagationBackground
	if foreground {
		propagation = metav1.DeletePropagationForeground
	}
	env.deleteCM(t, ns, "owner", propagation)
	if !watched {
		gc = start()
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

	env.c.StopAPIServer(t)
	for k, v := range backup {
		etcdPut(t, etcd, k, v)
	}
	hold.Store(true)
	env.c.StartAPIServer(t)
	if o := env.getCM(t, ns, "owner"); o.DeletionTimestamp != nil || o.UID != owner.UID {
		t.Fatalf("the restored owner: %+v; want uid %s, not being deleted", o.ObjectMeta, owner.UID)
	}
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
	once.Do(func() { close(release) })
	gc.waitObserved(t, owner.UID, "")
	gc.waitIdle(t)
	if got, err := secrets.Get(ctx, "dep", metav1.GetOptions{}); err != nil || got.UID != dep.UID {
		t.Errorf("the dependent once the owner is observed again: %v; want it kept; records %+v", err, gc.recordsFor(dep.UID))
	}
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
