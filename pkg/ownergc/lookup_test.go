package ownergc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// parkedInFlights counts the goroutines blocked inside flights.do: the one
// running the lookup (blocked in it) and those waiting for its result.
func parkedInFlights() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		blocked := bytes.Contains(header, []byte("[chan receive")) || bytes.Contains(header, []byte("[sync.WaitGroup.Wait"))
		if blocked && bytes.Contains(g, []byte("ownergc.(*flights).do")) {
			n++
		}
	}
	return n
}

// TestFlightsShareOneLookup: concurrent lookups of one key share a single
// request and all get its result, its error included; a lookup after it
// ends makes a new request.
func TestFlightsShareOneLookup(t *testing.T) {
	errLookup := errors.New("lookup failed")
	key := ownerKey{uid: "u", group: "apps", kind: "ReplicaSet", name: "web", namespace: "shop"}
	for name, tc := range map[string]struct {
		res lookupResult
		err error
	}{
		"a result": {res: lookupResult{class: classWaiting, reason: reasonWaiting}},
		"an error": {err: errLookup},
	} {
		t.Run(name, func(t *testing.T) {
			const n = 8
			var f flights
			var calls atomic.Int32
			release := make(chan struct{})
			lookup := func() (lookupResult, error) {
				calls.Add(1)
				<-release
				return tc.res, tc.err
			}
			type answer struct {
				res lookupResult
				err error
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					res, err := f.do(key, false, lookup)
					answers[i] = answer{res, err}
				})
			}
			testbed.WaitFor(t, 10*time.Second, "every lookup to wait in flights.do", func() bool { return parkedInFlights() == n })
			close(release)
			wg.Wait()
			if got := calls.Load(); got != 1 {
				t.Errorf("%d concurrent lookups of one key made %d requests, want 1", n, got)
			}
			for i, a := range answers {
				if a.res != tc.res || !errors.Is(a.err, tc.err) || (tc.err == nil && a.err != nil) {
					t.Errorf("lookup %d got (%v, %v), want (%v, %v)", i, a.res, a.err, tc.res, tc.err)
				}
			}
			if _, err := f.do(key, false, func() (lookupResult, error) { calls.Add(1); return lookupResult{}, nil }); err != nil || calls.Load() != 2 {
				t.Errorf("a lookup after the shared one: err %v, %d requests in all, want a second request", err, calls.Load())
			}
		})
	}
}

// TestFlightsKeepKeysApart: a lookup of another key, even one that differs
// only where a joined string form could blur it (a "/" moved between
// fields), makes its own request while the first is in flight.
func TestFlightsKeepKeysApart(t *testing.T) {
	// A reference's name is whatever its writer put there, "/" included.
	base := ownerKey{uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop"}
	for name, other := range map[string]ownerKey{
		"another uid":       {uid: "v", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop"},
		"another group":     {uid: "u", group: "extensions", kind: "ReplicaSet", name: "web/a", namespace: "shop"},
		"another kind":      {uid: "u", group: "apps", kind: "Deployment", name: "web/a", namespace: "shop"},
		"another name":      {uid: "u", group: "apps", kind: "ReplicaSet", name: "api", namespace: "shop"},
		"another namespace": {uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a", namespace: "shop2"},
		"cluster-scoped":    {uid: "u", group: "apps", kind: "ReplicaSet", name: "web/a"},
		"separator moved":   {uid: "u", group: "apps", kind: "ReplicaSet", name: "a", namespace: "shop/web"},
		"fields swapped":    {uid: "u", group: "apps", kind: "ReplicaSet", name: "shop", namespace: "web/a"},
	} {
		t.Run(name, func(t *testing.T) {
			var f flights
			release := make(chan struct{})
			first := make(chan lookupResult, 1)
			go func() {
				res, _ := f.do(base, false, func() (lookupResult, error) {
					<-release
					return lookupResult{class: classSolid, reason: reasonPresent}, nil
				})
				first <- res
			}()
			testbed.WaitFor(t, 10*time.Second, "the first lookup to be in flight", func() bool { return parkedInFlights() == 1 })
			// Were the keys merged, this lookup would wait for the first,
			// which waits for release: give up after a while.
			timer := time.AfterFunc(10*time.Second, func() { close(release) })
			want := lookupResult{class: classDangling, reason: reasonNotFound}
			got, err := f.do(other, false, func() (lookupResult, error) { return want, nil })
			if timer.Stop() {
				close(release)
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmp.AllowUnexported(lookupResult{})); diff != "" {
				t.Errorf("lookup of %+v while %+v is in flight (-want +got):\n%s", other, base, diff)
			}
			if res := <-first; res.reason != reasonPresent {
				t.Errorf("the first lookup got %+v, want its own result", res)
			}
		})
	}
}

// TestPresentOwnerVerdict: a lookup that finds present an owner the graph
// has not observed is kept for the owner, so that its other dependents
// need no request: a second after the first GET, then twice as long after
// each GET that finds it still there, up to maxRetryDelay. It only ever
// keeps a dependent: the absent-owner cache's verdict wins over it, and an
// owner deleting in the foreground (which makes its dependents deletable)
// is read each time, never kept. A verdict that ended a period ago goes,
// and the owner's next starts over from a second.
func TestPresentOwnerVerdict(t *testing.T) {
	s := newRejectServer(t)
	r, _, _, _ := rejectRun(t, s)
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	r.c.clock = clk
	ns := rejectNamespace
	key := ownerKey{uid: "owner", kind: "ConfigMap", namespace: ns, name: "owner"}
	s.refuse("owner", answerPolicyDenied("owner"), object(ns, "owner", "owner"))
	look := func(key ownerKey) lookupResult {
		t.Helper()
		res, err := r.lookupOwner(t.Context(), key, "v1", false)
		if err != nil {
			t.Fatalf("lookup of %v: %v", key, err)
		}
		return res
	}

	gets := 0
	for _, hold := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300} {
		hold *= time.Second
		want := lookupResult{class: classSolid, reason: reasonPresent, until: clk.Now().Add(hold)}
		gets++
		for _, step := range []time.Duration{0, hold - time.Millisecond} {
			clk.Step(step)
			if got := look(key); got != want || s.count(http.MethodGet, "owner") != gets {
				t.Fatalf("lookup %v into a verdict of %v: %+v after %d GETs, want %+v after %d", step, hold, got,
					s.count(http.MethodGet, "owner"), want, gets)
			}
		}
		clk.Step(time.Millisecond)
	}

	// Another owner's verdict, added a period after the first one ended,
	// sweeps it: the first starts over.
	other := ownerKey{uid: "other", kind: "ConfigMap", namespace: ns, name: "other"}
	s.refuse("other", answerPolicyDenied("other"), object(ns, "other", "other"))
	clk.Step(maxRetryDelay + time.Second)
	look(other)
	if got := look(key); got.until != clk.Now().Add(presentFirst) {
		t.Errorf("a verdict that ended more than a period before another was kept: the next holds until %v, want %v",
			got.until, clk.Now().Add(presentFirst))
	}

	// The owner is found absent elsewhere (by another key's lookup, or
	// before): that wins over the verdict that it is present.
	r.absent.add(key)
	if got := look(key); got.class != classDangling {
		t.Errorf("lookup of an owner in the absent-owner cache while a verdict that it is present holds: %+v, want dangling", got)
	}

	// An owner deleting in the foreground: each lookup reads it.
	deleting := object(ns, "other", "other", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))
	s.refuse("other", answerPolicyDenied("other"), deleting)
	clk.Step(maxRetryDelay)
	before := s.count(http.MethodGet, "other")
	for range 2 {
		if got := look(other); got.class != classWaiting || !got.until.IsZero() {
			t.Errorf("lookup of an owner deleting in the foreground: %+v, want waiting, not kept", got)
		}
	}
	if got := s.count(http.MethodGet, "other") - before; got != 2 {
		t.Errorf("%d GETs for two lookups of an owner deleting in the foreground, want 2 (its verdict is never kept)", got)
	}
}

// secretGETs counts the GETs of the Secrets of namespace ns that pass a
// transport it wraps, and answers them 403 Forbidden while forbid is set
// (RBAC without get on secrets), without sending them.
type secretGETs struct {
	ns     string
	forbid atomic.Bool
	n      atomic.Int64
}

func (s *secretGETs) wrap(next http.RoundTripper) http.RoundTripper {
	prefix := "/api/v1/namespaces/" + s.ns + "/secrets/"
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		name, ok := strings.CutPrefix(req.URL.Path, prefix)
		if !ok || req.Method != http.MethodGet {
			return next.RoundTrip(req)
		}
		s.n.Add(1)
		if !s.forbid.Load() {
			return next.RoundTrip(req)
		}
		status := apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, name, errors.New("no get on secrets")).ErrStatus
		status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
		body, err := json.Marshal(status)
		if err != nil {
			return nil, err
		}
		return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Request: req,
			Header: http.Header{"Content-Type": []string{"application/json"}}, Body: io.NopCloser(bytes.NewReader(body))}, nil
	})
}

// TestOwnerLookupsBounded: what owners the graph cannot observe cost.
// One cluster, each scenario with a collector of its own that ignores
// Secrets (so a Secret owner is only ever known by a lookup), one after
// the other: each collector would look up the other's owners too.
func TestOwnerLookupsBounded(t *testing.T) {
	env := newEnv(t)
	t.Run("an unobserved owner is read once per period, not once per dependent", func(t *testing.T) {
		testUnobservedOwnerReadOncePerPeriod(t, env)
	})
	t.Run("retries of failing lookups share one rate", func(t *testing.T) {
		testFailingLookupsRetryAtABoundedRate(t, env)
	})
}

// collectorIgnoringSecrets starts a collector that does not watch Secrets,
// whose GETs of the Secrets of a new namespace go through the returned
// counter.
func (e *itEnv) collectorIgnoringSecrets(t *testing.T, prefix string) (*testCollector, string, *secretGETs) {
	t.Helper()
	ns := e.namespace(t, prefix)
	gets := &secretGETs{ns: ns}
	rc := e.c.RESTConfig()
	rc.Wrap(gets.wrap)
	cfg := testConfig()
	cfg.GCIgnoredResources = append(cfg.GCIgnoredResources, config.GroupResource{Resource: "secrets"})
	return e.startCollectorVia(t, rc, cfg), ns, gets
}

// An owner whose kind the collector does not watch (in gcIgnoredResources;
// so too one without the watch verb, or whose monitor failed) exists: a
// lookup finds it, and its dependents are kept and looked at again later,
// in case it goes. The rule: that re-verification is the owner's, one GET
// per owner per period (a second, doubling up to maxRetryDelay), which
// answers all its dependents, as kube-controller-manager re-queues the
// virtual owner; and its deletion, found by the next GET, still collects
// them. Each dependent re-checked the owner on its own timer before: 130
// GETs in 40s for 300 dependents, a GET per dependent per 5 minutes for
// good.
func testUnobservedOwnerReadOncePerPeriod(t *testing.T, env *itEnv) {
	gc, ns, gets := env.collectorIgnoringSecrets(t, "lookup-period")
	owner, err := env.cs.CoreV1().Secrets(ns).Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	env.configMaps(t, t.Context(), ns, "dep", n, []metav1.OwnerReference{ref("v1", "Secret", owner, false)})
	const window = 40 * time.Second
	time.Sleep(window)
	lookups := counterByLabel(t, gc.reg, "nodegc_owner_gc_owner_lookups_total", "result")
	t.Logf("%d GETs of one unobserved owner in %v with %d dependents; lookups by result %v", gets.n.Load(), window, n, lookups)
	// Periods of 1, 2, 4, 8, 16 and 32s: 6 GETs in 40s, and a few more
	// for dependents created while the first was in flight.
	if got := gets.n.Load(); got > 10 {
		t.Errorf("%d GETs of one owner the graph cannot observe in %v, %d dependents; want about one per period (6)", got, window, n)
	}
	if left, err := env.countConfigMaps(t.Context(), ns, "dep"); err != nil || left != n {
		t.Fatalf("%d of %d dependents of an existing owner left (%v); want every one kept", left, n, err)
	}

	if err := env.cs.CoreV1().Secrets(ns).Delete(t.Context(), "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the dependents of the deleted owner to be collected", func(ctx context.Context) (bool, error) {
		left, err := env.countConfigMaps(ctx, ns, "dep")
		return left == 0, err
	})
}

// Lookups of owners that keep failing (RBAC forbids get, an aggregated API
// is down) leave their dependents undecided, retried with the item's
// backoff from 5ms. The rule: those retries of a queue share a token
// bucket of retryQPS (burst retryBurst), as kube-controller-manager's
// queues do, so that a great many undecided items cannot take the
// client's whole budget from the deletes. Here 300 dependents of 300
// Secrets the collector may not get: beside the 300 first attempts, at
// most the burst and retryQPS a second.
func testFailingLookupsRetryAtABoundedRate(t *testing.T, env *itEnv) {
	gc, ns, gets := env.collectorIgnoringSecrets(t, "lookup-failing")
	gets.forbid.Store(true)
	const n = 300
	owners := make([]metav1.OwnerReference, n)
	for i := range owners {
		owners[i] = metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: fmt.Sprintf("owner-%d", i), UID: types.UID(fmt.Sprintf("owner-uid-%d", i))}
	}
	begin := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, err := env.cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("dep-%d", i), OwnerReferences: owners[i : i+1]}}, metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create dependent %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	time.Sleep(20 * time.Second)
	got, elapsed := gets.n.Load(), time.Since(begin)
	lookups := counterByLabel(t, gc.reg, "nodegc_owner_gc_owner_lookups_total", "result")
	t.Logf("%d GETs of %d forbidden owners in %v; lookups by result %v", got, n, elapsed.Round(time.Second), lookups)
	if limit := int64(n + retryBurst + int(retryQPS*elapsed.Seconds()) + 20); got > limit {
		t.Errorf("%d GETs of %d forbidden owners in %v; want at most %d (the first attempts, the burst and %v a second)",
			got, n, elapsed.Round(time.Second), limit, retryQPS)
	}
	if left, err := env.countConfigMaps(t.Context(), ns, "dep"); err != nil || left != n {
		t.Errorf("%d of %d dependents of owners that cannot be read left (%v); want every one kept", left, n, err)
	}
}

// TestFreshLookupReadsTheOwner: a fresh lookup, of an owner whose absence
// is unsure (its resource's monitor lags), reads the owner whatever the
// caches say: an owner the absent-owner cache holds is found present (an
// etcd restore brought it back); without fresh the cache answers, no GET.
func TestFreshLookupReadsTheOwner(t *testing.T) {
	s := newRejectServer(t)
	r, _, _, _ := rejectRun(t, s)
	ns := rejectNamespace
	key := ownerKey{uid: "owner", kind: "ConfigMap", namespace: ns, name: "owner"}
	s.refuse("owner", answerPolicyDenied("owner"), object(ns, "owner", "owner"))
	r.absent.add(key)
	res, err := r.lookupOwner(t.Context(), key, "v1", false)
	if err != nil || res.class != classDangling || s.count(http.MethodGet, "owner") != 0 {
		t.Fatalf("a lookup of an owner in the absent cache: %+v, %v after %d GETs; want dangling from the cache", res, err, s.count(http.MethodGet, "owner"))
	}
	res, err = r.lookupOwner(t.Context(), key, "v1", true)
	if err != nil || res.class != classSolid || s.count(http.MethodGet, "owner") != 1 {
		t.Fatalf("a fresh lookup of an owner in the absent cache that exists: %+v, %v after %d GETs; want it read and present", res, err, s.count(http.MethodGet, "owner"))
	}
	if r.absent.has(key) {
		t.Error("the owner found present stays in the absent cache")
	}
}
