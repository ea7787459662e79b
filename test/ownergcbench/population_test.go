package ownergcbench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The population of the memory and start-up rows, shaped like a cluster's:
// groups of groupSize objects in populationNamespaces namespaces, each a
// ConfigMap that owns the other nine as a ReplicaSet owns its Pods (one
// controller reference with blockOwnerDeletion); the nine are ConfigMaps,
// Secrets and ServiceAccounts in turn. Names are about 40 characters, each
// object has four labels and one annotation of about 180 characters;
// ConfigMaps and Secrets hold a little data (the collectors list metadata
// only). A garbage-collector-only kube-controller-manager has no controller
// for any of these kinds (the bench checks that nobody writes them while
// the collectors sync and idle).
const (
	groupSize            = 10
	populationNamespaces = 50
	createWorkers        = 64
)

// apps name the groups' workloads.
var apps = []string{
	"checkout-service", "inventory-api", "payments-worker", "recommendation-engine",
	"user-profile-svc", "search-indexer", "notification-sender", "image-resizer",
}

func populationNamespace(group int) string {
	return fmt.Sprintf("team-%02d", group%populationNamespaces)
}

// groupObjects returns the name, labels and annotations of group g's
// objects: the owner's name, and a name for member m (1..groupSize-1).
func groupObjects(g int) (owner string, member func(m int) string, labels, annotations map[string]string) {
	app := apps[g%len(apps)]
	hash := fmt.Sprintf("%010x", uint64(g)*0x9e3779b97f4a7c15>>24)[:10]
	owner = fmt.Sprintf("%s-%06d-%s", app, g, hash)
	member = func(m int) string {
		return fmt.Sprintf("%s-%c%04x", owner, 'a'+m, (uint64(g)*0x2545f491)&0xffff)
	}
	labels = map[string]string{
		"app.kubernetes.io/name":     app,
		"app.kubernetes.io/instance": app + "-production",
		"app.kubernetes.io/part-of":  "shop",
		"pod-template-hash":          hash,
	}
	annotations = map[string]string{
		"kubernetes.io/change-cause": fmt.Sprintf("kubectl apply --filename=deploy/%s/overlays/production --server-side=true "+
			"--field-manager=ci-pipeline --record=true (build %s, triggered by merge request !%d)", app, hash, 1000+g%9000),
	}
	return owner, member, labels, annotations
}

// populate creates the population's objects from index from to to
// (multiples of groupSize): groups from/groupSize to to/groupSize.
func (e *benchEnv) populate(from, to int) {
	e.b.Helper()
	ctx := e.b.Context()
	if from == 0 {
		for i := range populationNamespaces {
			_, err := e.fast.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: populationNamespace(i)}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				e.b.Fatal(err)
			}
		}
	}
	var created atomic.Int64
	progress := e.progress(fmt.Sprintf("created %%d/%d objects of the population", to), int64(from), created.Load)
	defer progress()
	err := runParallel(ctx, createWorkers, (to-from)/groupSize, func(ctx context.Context, i int) error {
		err := e.createGroup(ctx, from/groupSize+i)
		if err == nil {
			created.Add(groupSize)
		}
		return err
	})
	if err != nil {
		e.b.Fatalf("create the population: %v", err)
	}
}

// createGroup creates group g: its owner, then its members.
func (e *benchEnv) createGroup(ctx context.Context, g int) error {
	ns := populationNamespace(g)
	ownerName, member, labels, annotations := groupObjects(g)
	meta := func(name string, owner *metav1.OwnerReference) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations}
		if owner != nil {
			m.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return m
	}
	core := e.fast.CoreV1()
	owner, err := core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(ownerName, nil),
		Data: map[string]string{"replicas": "9", "strategy": "RollingUpdate"}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create ConfigMap %s/%s: %w", ns, ownerName, err)
	}
	ref := &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	for m := 1; m < groupSize; m++ {
		name := member(m)
		switch m % 3 {
		case 1:
			_, err = core.ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta(name, ref),
				Data: map[string]string{"application.properties": "server.port=8080\nlogging.level.root=INFO\nfeature.flags=checkout-v2,fast-search\n"}}, metav1.CreateOptions{})
		case 2:
			_, err = core.Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta(name, ref),
				Data: map[string][]byte{"token": []byte(strings.Repeat(fmt.Sprintf("%08x", g), 4))}}, metav1.CreateOptions{})
		default:
			_, err = core.ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta(name, ref)}, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("create %s/%s (member %d of group %d): %w", ns, name, m, g, err)
		}
	}
	return nil
}

// populationResources are the resources the population is made of.
var populationResources = []string{"configmaps", "secrets", "serviceaccounts"}

// populationWrites counts the write requests (create, update, patch,
// delete) on the population's resources that kube-apiserver has served.
func (e *benchEnv) populationWrites() int64 {
	e.b.Helper()
	var n int64
	for _, res := range populationResources {
		counts, err := e.c.APIServerRequests(e.b.Context(), res)
		if err != nil {
			e.b.Fatal(err)
		}
		for _, verb := range []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"} {
			n += counts[verb]
		}
	}
	return n
}

// runParallel calls fn(ctx, i) for every i in [0, n) from workers
// goroutines, and returns the first error (the others stop at their next
// item).
func runParallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// parallel creates n objects with create (from createWorkers goroutines),
// printing progress; what names them.
func (e *benchEnv) parallel(what string, n int, create func(ctx context.Context, i int) error) {
	e.b.Helper()
	var done atomic.Int64
	progress := e.progress(fmt.Sprintf("created %%d/%d %s", n, what), 0, done.Load)
	defer progress()
	if err := runParallel(e.b.Context(), createWorkers, n, func(ctx context.Context, i int) error {
		err := create(ctx, i)
		done.Add(1)
		return err
	}); err != nil {
		e.b.Fatalf("create %s: %v", what, err)
	}
}

// progressEvery is how often progress prints a line.
const progressEvery = 10 * time.Second

// progress prints format (with one %d, filled with base + count()) and
// the rate of count every progressEvery until the returned function is
// called, which prints the last line.
func (e *benchEnv) progress(format string, base int64, count func() int64) (done func()) {
	begin := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	line := func() {
		n := count()
		fmt.Printf("[bench] "+format+" (%.0f/s)\n", base+n, float64(n)/time.Since(begin).Seconds())
	}
	wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				line()
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		line()
	}
}
