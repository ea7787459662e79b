package ownergc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
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
