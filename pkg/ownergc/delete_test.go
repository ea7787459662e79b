package ownergc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// deleteServer is an HTTP/2 TLS server that answers a DELETE of a
// ConfigMap in deleteNamespace as kube-apiserver answers a delete that
// succeeded, with a Status in protobuf, and anything else with 400. It
// counts the DELETEs it answered.
type deleteServer struct {
	*httptest.Server
	deletes atomic.Int64
}

const deleteNamespace = "cascade-1234abcd"

func newDeleteServer(tb testing.TB) *deleteServer {
	tb.Helper()
	status := encodeProtobuf(tb, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{Kind: "configmaps", UID: uuid.NewUUID()}})
	s := &deleteServer{}
	prefix := "/api/v1/namespaces/" + deleteNamespace + "/configmaps/"
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if req.Method != http.MethodDelete || !strings.HasPrefix(req.URL.Path, prefix) {
			http.Error(w, "not a DELETE of a ConfigMap in "+deleteNamespace, http.StatusBadRequest)
			return
		}
		s.deletes.Add(1)
		w.Header().Set("Content-Type", k8sruntime.ContentTypeProtobuf)
		_, _ = w.Write(status)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	tb.Cleanup(s.Close)
	return s
}

// config is an unthrottled client config for s, as the bench's clients
// are (not verifying s's certificate, as testMetaClient does not).
func (s *deleteServer) config() *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: "token", QPS: -1, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// benchDeletes runs del for b.N distinct names, 20 at a time, and checks
// that s answered each.
func benchDeletes(b *testing.B, s *deleteServer, del func(ctx context.Context, name string) error) {
	b.Helper()
	b.SetParallelism(max(1, 20/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	var made atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := del(b.Context(), fmt.Sprintf("d-%06d", made.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if got, want := s.deletes.Load(), made.Load(); got != want {
		b.Fatalf("the server answered %d DELETEs of %d", got, want)
	}
}

// BenchmarkDelete measures the client's side of one DELETE of a cascade's
// dependent, 20 at a time (the collector's workers, the bench loop's
// goroutines), against a server that only answers: the collector's
// deleteObject (the mapping, the preconditions, the request's timeout, the
// options in protobuf); the typed client of the bench's plain DELETE loop
// (protobuf, no options); and client-go's metadata client, as
// kube-controller-manager's collector deletes (options in JSON). The
// server's part is the same in each.
func BenchmarkDelete(b *testing.B) {
	b.Run("collector", func(b *testing.B) {
		s := newDeleteServer(b)
		c := &Collector{requestTimeout: 30 * time.Second}
		var err error
		if c.writes, err = newMetaClient(s.config()); err != nil {
			b.Fatal(err)
		}
		mapper := meta.NewDefaultRESTMapper(nil)
		mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
		r := &run{c: c}
		r.snapshot.Store(&discoverySnapshot{mapper: mapper})
		uid := uuid.NewUUID()
		benchDeletes(b, s, func(ctx context.Context, name string) error {
			id := objectID{uid: uid, apiVersion: "v1", kind: "ConfigMap", namespace: deleteNamespace, name: name}
			return r.deleteObject(ctx, id, "123456", metav1.DeletePropagationBackground)
		})
	})
	b.Run("typed-loop", func(b *testing.B) {
		s := newDeleteServer(b)
		rc := s.config()
		rc.ContentType = k8sruntime.ContentTypeProtobuf
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			b.Fatal(err)
		}
		cms := cs.CoreV1().ConfigMaps(deleteNamespace)
		benchDeletes(b, s, func(ctx context.Context, name string) error {
			return cms.Delete(ctx, name, metav1.DeleteOptions{})
		})
	})
	b.Run("metadata-client", func(b *testing.B) {
		s := newDeleteServer(b)
		mc, err := metadata.NewForConfig(s.config())
		if err != nil {
			b.Fatal(err)
		}
		res := mc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(deleteNamespace)
		policy := metav1.DeletePropagationBackground
		uid := uuid.NewUUID()
		benchDeletes(b, s, func(ctx context.Context, name string) error {
			return res.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &policy})
		})
	})
}

// answerRecorder counts the bytes of the answers to the DELETEs that go
// through it and, if keep is set, keeps the Content-Type and the body of
// the last one.
type answerRecorder struct {
	keep        bool
	mu          sync.Mutex
	contentType string
	body        []byte
	total       int64
}

// recordingMetaClient returns an unthrottled metaClient of env's cluster
// whose DELETEs' answers go through the returned recorder.
func (e *itEnv) recordingMetaClient(tb testing.TB, keep bool) (*metaClient, *answerRecorder) {
	tb.Helper()
	rec := &answerRecorder{keep: keep}
	rc := e.c.RESTConfig()
	rc.QPS = -1
	rc.Wrap(rec.wrap)
	mc, err := newMetaClient(rc)
	if err != nil {
		tb.Fatal(err)
	}
	return mc, rec
}

func (a *answerRecorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || req.Method != http.MethodDelete {
			return resp, err
		}
		resp.Body = &answerBody{ReadCloser: resp.Body, a: a, contentType: resp.Header.Get("Content-Type")}
		return resp, nil
	})
}

// answerBody counts (and keeps, if its recorder does) what is read of an
// answer, and hands it to the recorder when closed.
type answerBody struct {
	io.ReadCloser
	a           *answerRecorder
	contentType string
	n           int64
	body        []byte
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if b.a.keep {
		b.body = append(b.body, p[:n]...)
	}
	return n, err
}

func (b *answerBody) Close() error {
	b.a.mu.Lock()
	b.a.contentType, b.a.body = b.contentType, b.body
	b.a.total += b.n
	b.a.mu.Unlock()
	return b.ReadCloser.Close()
}

// bytes is the size of every answer so far.
func (a *answerRecorder) bytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// last returns the kind of the last answer (the kind in its protobuf
// envelope or its JSON), its Content-Type and its size.
func (a *answerRecorder) last() (kind, contentType string, size int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var tm metav1.TypeMeta
	if body, ok := bytes.CutPrefix(a.body, []byte("k8s\x00")); ok {
		var u k8sruntime.Unknown
		if err := u.Unmarshal(body); err == nil {
			tm = metav1.TypeMeta{APIVersion: u.APIVersion, Kind: u.Kind}
		}
	} else {
		_ = json.Unmarshal(a.body, &tm)
	}
	return tm.Kind, a.contentType, len(a.body)
}

// testDeleteAnswer: the collector's deletes ask kube-apiserver for the
// deleted object's metadata alone. A Pod's delete answers with the Pod,
// and a delete held by a finalizer with the object as updated: both come
// back as PartialObjectMetadata, smaller than the object the same delete
// answers without the header. Statuses and errors keep what the collector
// reads from them: success, the 404 about the object (with its name, which
// tells it from a 404 about the resource) and the 409 of a failed
// precondition.
func testDeleteAnswer(t *testing.T, env *itEnv) {
	ctx := t.Context()
	ns := env.namespace(t, "answer")
	mc, rec := env.recordingMetaClient(t, true)
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	cms := corev1.SchemeGroupVersion.WithResource("configmaps")
	pod := func(name string) *corev1.Pod {
		p, err := env.cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "answer"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1.0", Args: []string{"--port=8080"},
				Env: []corev1.EnvVar{{Name: "MODE", Value: "production"}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	uidOf := func(o metav1.Object) metav1.DeleteOptions {
		uid := o.GetUID()
		return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	}
	const partial = "PartialObjectMetadata"

	// The Pod, as the collector deletes it, and its twin without the header.
	p := pod("collected")
	if err := mc.delete(ctx, pods, ns, p.Name, uidOf(p)); err != nil {
		t.Fatalf("collector's delete of Pod %s: %v", p.Name, err)
	}
	kind, ct, size := rec.last()
	if kind != partial {
		t.Errorf("collector's delete of Pod %s answered a %q (%s, %d bytes), want a %s", p.Name, kind, ct, size, partial)
	}
	twin := pod("twin")
	req, err := mc.deleteRequest(pods, ns, twin.Name, uidOf(twin))
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Do(ctx).Error(); err != nil {
		t.Fatalf("delete of Pod %s without the header: %v", twin.Name, err)
	}
	fullKind, fullCT, fullSize := rec.last()
	if fullKind != "Pod" || size >= fullSize {
		t.Errorf("delete of Pod %s without the header answered a %q (%s, %d bytes); want the Pod, larger than the collector's answer (%d bytes)", twin.Name, fullKind, fullCT, fullSize, size)
	}
	t.Logf("Pod delete answers: a %s of %d bytes (%s) for the collector, a %s of %d bytes (%s) without its header", kind, size, ct, fullKind, fullSize, fullCT)

	// Held by a finalizer: the answer is the object as updated.
	held := env.configMap(t, ns, "held", nil, "test.nodegc.io/hold")
	if err := mc.delete(ctx, cms, ns, held.Name, uidOf(held)); err != nil {
		t.Fatalf("collector's delete of ConfigMap %s (held by a finalizer): %v", held.Name, err)
	}
	if kind, ct, size := rec.last(); kind != partial {
		t.Errorf("collector's delete of ConfigMap %s, held by a finalizer, answered a %q (%s, %d bytes), want a %s", held.Name, kind, ct, size, partial)
	}
	if got, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, held.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp == nil {
		t.Errorf("ConfigMap %s after the delete: %v, err %v; want it there, being deleted", held.Name, got, err)
	}

	// Deleted at once: a Status.
	plain := env.configMap(t, ns, "plain", nil)
	if err := mc.delete(ctx, cms, ns, plain.Name, uidOf(plain)); err != nil {
		t.Fatalf("collector's delete of ConfigMap %s: %v", plain.Name, err)
	}
	if kind, ct, size := rec.last(); kind != "Status" {
		t.Errorf("collector's delete of ConfigMap %s answered a %q (%s, %d bytes), want a Status", plain.Name, kind, ct, size)
	}
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, plain.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap %s after the delete: err %v, want NotFound", plain.Name, err)
	}

	// Errors: the object gone, and a precondition that fails.
	err = mc.delete(ctx, cms, ns, plain.Name, uidOf(plain))
	if kind, ct, _ := rec.last(); !objectNotFound(err, plain.Name) || kind != "Status" {
		t.Errorf("second delete of ConfigMap %s: %v (a %q, %s); want a Status, 404 about the object", plain.Name, err, kind, ct)
	}
	other := env.configMap(t, ns, "other", nil)
	wrong := uidOf(plain) // plain's UID, not other's
	if err := mc.delete(ctx, cms, ns, other.Name, wrong); !apierrors.IsConflict(err) {
		kind, ct, _ := rec.last()
		t.Errorf("delete of ConfigMap %s with another object's UID: %v (a %q, %s); want 409 Conflict", other.Name, err, kind, ct)
	}
	if _, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap %s after a delete whose precondition failed: %v, want it kept", other.Name, err)
	}
}
