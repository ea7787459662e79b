package ownergc

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/pkg/config"
)

// itEnv is a real kube-apiserver + etcd shared by the integration tests.
type itEnv struct {
	c   *cluster.Cluster
	cs  kubernetes.Interface
	dyn dynamic.Interface
}

func newEnv(t *testing.T) *itEnv {
	c := cluster.Start(t, cluster.Options{})
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &itEnv{c: c, cs: c.Client(), dyn: dyn}
}

// namespace creates a fresh namespace. No namespace controller runs, so it
// is never deleted; the cluster goes at the end.
func (e *itEnv) namespace(t testing.TB, prefix string) string {
	t.Helper()
	name := prefix + "-" + utilrand.String(5)
	_, err := e.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// ref returns an owner reference to obj.
func ref(apiVersion, kind string, obj metav1.Object, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: obj.GetName(), UID: obj.GetUID(),
		BlockOwnerDeletion: ptr.To(block)}
}

func cmRef(cm *corev1.ConfigMap, block bool) metav1.OwnerReference {
	return ref("v1", "ConfigMap", cm, block)
}

// configMap creates a ConfigMap with the given owners and finalizers.
func (e *itEnv) configMap(t *testing.T, ns, name string, owners []metav1.OwnerReference, finalizers ...string) *corev1.ConfigMap {
	t.Helper()
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name, OwnerReferences: owners, Finalizers: finalizers,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ConfigMap %s/%s: %v", ns, name, err)
	}
	return cm
}

// configMaps creates n ConfigMaps prefix-0..n-1 with the given owners, with
// parallel requests on the unthrottled admin client.
func (e *itEnv) configMaps(tb testing.TB, ctx context.Context, ns, prefix string, n int, owners []metav1.OwnerReference) []*corev1.ConfigMap {
	tb.Helper()
	out := make([]*corev1.ConfigMap, n)
	errs := make(chan error, n)
	idx := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range idx {
				cm, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-%d", prefix, i), OwnerReferences: owners,
				}}, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					continue
				}
				out[i] = cm
			}
		})
	}
	for i := range n {
		idx <- i
	}
	close(idx)
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("create ConfigMaps %s/%s-*: %v", ns, prefix, err)
	}
	return out
}

func (e *itEnv) countConfigMaps(ctx context.Context, ns, prefix string) (int, error) {
	l, err := e.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, cm := range l.Items {
		if strings.HasPrefix(cm.Name, prefix+"-") {
			n++
		}
	}
	return n, nil
}

// eventually polls cond (see testbed.Poll) until it holds, failing the
// test after timeout. An error from cond is retried, the last one reported.
func eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var last error
	err := testbed.Poll(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		return ok && err == nil, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
	}
}

// gone reports whether get returns NotFound.
func gone(get func(context.Context) error) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := get(ctx)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
}

func (e *itEnv) cmGone(ns, name string) func(context.Context) (bool, error) {
	return gone(func(ctx context.Context) error {
		_, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
}

func (e *itEnv) getCM(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap %s/%s: %v", ns, name, err)
	}
	return cm
}

func (e *itEnv) deleteCM(t *testing.T, ns, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	if err := e.cs.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatalf("delete ConfigMap %s/%s (%s): %v", ns, name, policy, err)
	}
}

// removeFinalizers clears a ConfigMap's finalizers.
func (e *itEnv) removeFinalizers(t *testing.T, ns, name string) {
	t.Helper()
	_, err := e.cs.CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("remove finalizers of %s/%s: %v", ns, name, err)
	}
}

// testCollector is a Collector running against the test cluster.
type testCollector struct {
	*Collector
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
	stopped time.Duration
	logs    *syncBuffer

	mu      sync.Mutex
	records []recordedAction
	// beforeWrite hooks by namespace, for scenarios that race the collector.
	beforeWrite sync.Map // namespace → func(action string, id objectID)
}

type recordedAction struct {
	id     objectID
	rec    decisionRecord
	dryRun bool
}

// syncBuffer collects the collector's logs; they are printed when a test
// fails.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) tail(lines int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	all := strings.Split(b.buf.String(), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// testConfig is the collector configuration of the integration tests:
// unthrottled, with a short discovery period.
func testConfig() config.OwnerGCConfiguration {
	cfg := config.Defaulted().OwnerGC
	cfg.KubeAPIQPS, cfg.KubeAPIBurst = 2000, 4000
	cfg.DiscoveryResyncPeriod = metav1.Duration{Duration: 2 * time.Second}
	return cfg
}

// startCollector runs a collector until the test ends and waits until it
// has synced.
func (e *itEnv) startCollector(t testing.TB, cfg config.OwnerGCConfiguration, tweak ...func(*Collector)) *testCollector {
	t.Helper()
	return e.startCollectorVia(t, e.c.RESTConfig(), cfg, tweak...)
}

// viaProxy starts a proxy to the API server, closed when the test ends,
// and returns it with a REST config that goes through it.
func (e *itEnv) viaProxy(t testing.TB) (*testbed.Proxy, *rest.Config) {
	t.Helper()
	u, err := url.Parse(e.c.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := testbed.StartProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	rc := e.c.RESTConfig()
	rc.Host = "https://" + proxy.Addr
	rc.ServerName = "127.0.0.1" // the serving certificate's IP SAN, as seen through the proxy
	return proxy, rc
}

// startCollectorVia is startCollector with the collector's own REST config
// (e.g. through a testbed.Proxy).
func (e *itEnv) startCollectorVia(t testing.TB, rc *rest.Config, cfg config.OwnerGCConfiguration, tweak ...func(*Collector)) *testCollector {
	t.Helper()
	return e.startCollectorWith(t, Options{Config: cfg, RESTConfig: rc}, tweak...)
}

// startCollectorWith is startCollector with options of its own (its
// Registerer is the test collector's).
func (e *itEnv) startCollectorWith(t testing.TB, opts Options, tweak ...func(*Collector)) *testCollector {
	t.Helper()
	tc := &testCollector{reg: prometheus.NewRegistry(), done: make(chan error, 1), logs: &syncBuffer{}}
	opts.Registerer = tc.reg
	gc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tc.Collector = gc
	gc.hooks.onRecord = func(id objectID, rec decisionRecord, dryRun bool) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		tc.records = append(tc.records, recordedAction{id: id, rec: rec, dryRun: dryRun})
	}
	gc.hooks.beforeWrite = func(_ context.Context, action string, id objectID) {
		if f, ok := tc.beforeWrite.Load(id.namespace); ok {
			f.(func(string, objectID))(action, id)
		}
	}
	gc.failureGrace, gc.syncTimeout = 2*time.Second, 5*time.Second
	// Every collector of these tests is watched for a stall at twice the
	// request timeout rather than ten times: a request to the test's API
	// server ends in milliseconds, or by its timeout where a test makes it
	// hang.
	gc.stallAfter = 2 * gc.requestTimeout
	for _, f := range tweak {
		f(gc)
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(tc.logs), textlogger.Verbosity(4)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	tc.cancel = cancel
	go func() { tc.done <- gc.Run(ctx) }()
	stalls := make(chan error, 1)
	go func() {
		defer close(stalls)
		for ctx.Err() == nil {
			if err := gc.Stalled(); err != nil {
				stalls <- err
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		tc.stop(t)
		if err := <-stalls; err != nil {
			t.Errorf("the collector stalled: %v", err)
		}
		if t.Failed() {
			t.Logf("--- last lines of the collector's log ---\n%s", tc.logs.tail(60))
		}
	})
	eventually(t, 60*time.Second, "the collector to sync", func(context.Context) (bool, error) { return gc.HasSynced(), nil })
	return tc
}

// stop cancels Run and waits for it to return; it returns how long that
// took.
func (tc *testCollector) stop(t testing.TB) time.Duration {
	t.Helper()
	begin := time.Now()
	defer func() { tc.stopped = time.Since(begin) }()
	tc.cancel()
	select {
	case err, ok := <-tc.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(tc.done)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("Run did not return within 30s of its context's end")
	}
	return time.Since(begin)
}

// settledRecords waits until each uid has a decision record (a write is
// visible in the API before its record is logged), then until the collector
// is idle, and returns every record about uids.
func (tc *testCollector) settledRecords(t *testing.T, uids ...types.UID) map[types.UID][]recordedAction {
	t.Helper()
	eventually(t, 30*time.Second, "decision records", func(context.Context) (bool, error) {
		for _, u := range uids {
			if len(tc.recordsFor(u)) == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	tc.waitIdle(t)
	out := map[types.UID][]recordedAction{}
	for _, u := range uids {
		out[u] = tc.recordsFor(u)
	}
	return out
}

// recordsFor returns the decision records about uid.
func (tc *testCollector) recordsFor(uid types.UID) []recordedAction {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []recordedAction
	for _, r := range tc.records {
		if r.id.uid == uid {
			out = append(out, r)
		}
	}
	return out
}

// waitIdle waits until the collector has applied every event it received
// and has no work queued or in progress, several polls in a row.
func (tc *testCollector) waitIdle(t *testing.T) {
	t.Helper()
	quiet := 0
	eventually(t, 60*time.Second, "the collector to be idle", func(ctx context.Context) (bool, error) {
		r := tc.current.Load()
		if r == nil {
			return false, fmt.Errorf("not running")
		}
		if err := r.barrier(ctx); err != nil {
			return false, err
		}
		if r.idle() {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 3, nil
	})
}

// waitObserved waits until the collector's graph holds uid at rv.
func (tc *testCollector) waitObserved(t *testing.T, uid types.UID, rv string) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("the graph to observe %s at resourceVersion %s", uid, rv), func(context.Context) (bool, error) {
		r := tc.current.Load()
		return r != nil && r.graph.hasObserved(uid, rv), nil
	})
}

// waitGraph waits until cond holds on the collector's graph (read-locked).
func (tc *testCollector) waitGraph(t *testing.T, what string, cond func(*graph) bool) {
	t.Helper()
	eventually(t, 30*time.Second, what, func(context.Context) (bool, error) {
		r := tc.current.Load()
		if r == nil {
			return false, nil
		}
		r.graph.mu.RLock()
		defer r.graph.mu.RUnlock()
		return cond(r.graph), nil
	})
}

// hasMonitor reports whether the collector watches gvr.
func (tc *testCollector) hasMonitor(gvr schema.GroupVersionResource) bool {
	r := tc.current.Load()
	if r == nil {
		return false
	}
	r.monitors.mu.Lock()
	defer r.monitors.mu.Unlock()
	m, ok := r.monitors.byGR[gvr.GroupResource()]
	return ok && m.res.gvr == gvr
}

// requests returns the collector's API requests by verb.
func (tc *testCollector) requests(t testing.TB) map[string]float64 {
	t.Helper()
	return counterByLabel(t, tc.reg, "nodegc_owner_gc_api_requests_total", "verb")
}

// counterByLabel sums a counter family of reg by one label.
func counterByLabel(t testing.TB, reg *prometheus.Registry, name, label string) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			value := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					value = l.GetValue()
				}
			}
			out[value] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}
