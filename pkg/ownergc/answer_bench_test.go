package ownergc

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// BenchmarkDeleteAnswer measures what asking for a delete's answer as
// metadata saves kube-apiserver and the collector, in two cases where a
// delete answers with the object: Pods (a ReplicaSet's, as a cascade
// collects them; a Pod's storage answers a delete with the deleted Pod, in
// protobuf), and custom resources with 16 KiB of spec, held by a finalizer
// of their own (an operator's, as many put; the answer is the object as
// updated, in JSON: custom resources have no protobuf). The collector's
// deletes, 20 at a time, run against the same deletes without its Accept
// header. Each round deletes $NODEGC_BENCH_ANSWER_OBJECTS (1,000) objects
// each way, in turn, on a real kube-apiserver + etcd;
// $NODEGC_BENCH_ANSWER_ROUNDS (8) rounds. It reports the CPU time of
// kube-apiserver, etcd and the client (this process) and the answer's bytes
// per delete each way, and the ratio of kube-apiserver's CPU time per
// delete (metadata over object): its geometric mean over the rounds, and
// the rounds and the 95% interval in the log (testbed.RatioInterval).
func BenchmarkDeleteAnswer(b *testing.B) {
	objects, rounds := envInt(b, "NODEGC_BENCH_ANSWER_OBJECTS", 1000), envInt(b, "NODEGC_BENCH_ANSWER_ROUNDS", 8)
	c := cluster.Start(b, cluster.Options{})
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	env := &itEnv{c: c, cs: c.Client(), dyn: dyn}
	widgets := schema.GroupVersionResource{Group: "bench.nodegc.io", Version: "v1", Resource: "widgets"}
	env.createCRD(b, widgets.Group, widgets.Resource, "Widget", []any{crdVersion("v1", true)}, nil)

	b.Run("Pod", func(b *testing.B) {
		benchDeleteAnswer(b, env, corev1.SchemeGroupVersion.WithResource("pods"), objects, rounds, func(ns string, n int) []objectRef {
			return createReplicaSetPods(b, env.cs, ns, n)
		})
	})
	b.Run("held-custom-resource", func(b *testing.B) {
		benchDeleteAnswer(b, env, widgets, objects, rounds, func(ns string, n int) []objectRef {
			return createHeldWidgets(b, env, widgets, ns, n)
		})
	})
}

// objectRef names an object the benchmark deletes.
type objectRef struct {
	name string
	uid  types.UID
}

// benchDeleteAnswer is one case of BenchmarkDeleteAnswer: create makes n
// objects of gvr in namespace ns.
func benchDeleteAnswer(b *testing.B, env *itEnv, gvr schema.GroupVersionResource, objects, rounds int, create func(ns string, n int) []objectRef) {
	pids := env.c.PIDs()
	mc, rec := env.recordingMetaClient(b, false)
	ctx := b.Context()

	type way struct {
		name string
		del  func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error
		// Totals over the rounds.
		apiserver, etcd, client time.Duration
		bytes                   int64
		n                       int
	}
	ways := []*way{
		{name: "metadata", del: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			return mc.delete(ctx, gvr, ns, name, opts)
		}},
		{name: "object", del: func(ctx context.Context, ns, name string, opts metav1.DeleteOptions) error {
			req, err := mc.deleteRequest(gvr, ns, name, opts)
			if err != nil {
				return err
			}
			// The client's own Accept header (metadata.ConfigFor's), as
			// testDeleteAnswer's twin is deleted.
			return req.Do(ctx).Error()
		}},
	}
	cpu := func() (apiserver, etcd, client time.Duration) {
		var out [3]time.Duration
		for i, pid := range []int{pids["kube-apiserver"], pids["etcd"], os.Getpid()} {
			t, err := proc.ReadCPUTime(pid)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = t
		}
		return out[0], out[1], out[2]
	}
	var ratios []float64
	for round := range rounds {
		per := map[*way]float64{}
		for i := range ways {
			w := ways[(i+round)%len(ways)] // alternate which goes first
			ns := env.namespace(b, fmt.Sprintf("answer-%s-%s-%d", gvr.Resource, w.name, round))
			made := create(ns, objects)
			time.Sleep(time.Second) // let kube-apiserver settle after the creates
			bytes0 := rec.bytes()
			a0, e0, c0 := cpu()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(20)
			for _, o := range made {
				g.Go(func() error {
					return w.del(gctx, ns, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.uid},
						PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatalf("round %d, %s: %v", round, w.name, err)
			}
			a1, e1, c1 := cpu()
			w.apiserver += a1 - a0
			w.etcd += e1 - e0
			w.client += c1 - c0
			w.bytes += rec.bytes() - bytes0
			w.n += len(made)
			per[w] = float64(a1-a0) / float64(len(made))
		}
		ratios = append(ratios, per[ways[0]]/per[ways[1]])
	}
	for _, w := range ways {
		b.ReportMetric(float64(w.apiserver.Microseconds())/float64(w.n), "apiserver-us/delete-"+w.name)
		b.ReportMetric(float64(w.etcd.Microseconds())/float64(w.n), "etcd-us/delete-"+w.name)
		b.ReportMetric(float64(w.client.Microseconds())/float64(w.n), "client-us/delete-"+w.name)
		b.ReportMetric(float64(w.bytes)/float64(w.n), "answer-B/delete-"+w.name)
	}
	mean, lo, hi := testbed.RatioInterval(ratios)
	b.ReportMetric(mean, "apiserver-metadata/object")
	b.Logf("%s: kube-apiserver's CPU per delete, answer as metadata over answer as the object, round by round: %.3f; geometric mean %.3f, 95%% interval %.3f-%.3f",
		gvr.Resource, ratios, mean, lo, hi)
	b.ReportMetric(0, "ns/op") // rounds of many deletes: ns/op says nothing
}

// envInt reads a positive integer from the environment, def when unset.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("$%s=%q: want a positive integer", name, v)
	}
	return n
}

// createReplicaSetPods creates n Pods in namespace ns as a
// ReplicaSet's controller makes them from a typical Deployment's template
// (labels, an owner reference, one container with ports, env, resources
// and probes, a ConfigMap volume), not bound to a node: kube-apiserver
// deletes them at once, answering with the Pod.
func createReplicaSetPods(b *testing.B, cs kubernetes.Interface, ns string, n int) []objectRef {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7d9f8b6c5d", UID: types.UID(uuid.NewUUID()),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	labels := map[string]string{"app.kubernetes.io/name": "checkout", "app.kubernetes.io/part-of": "shop", "pod-template-hash": "7d9f8b6c5d"}
	env := []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"}, {Name: "DB_HOST", Value: "postgres.shop.svc"},
		{Name: "CACHE_URL", Value: "redis://redis.shop.svc:6379"}, {Name: "FEATURES", Value: "checkout-v2,fast-search"},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http")}},
			PeriodSeconds: 10, FailureThreshold: 3}
	}
	return createEach(b, ns, n, func(ctx context.Context, i int) (objectRef, error) {
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("checkout-7d9f8b6c5d-%05d", i), Labels: labels,
				Annotations:     map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "checkout", Image: "registry.example.com/shop/checkout:v2.14.3", Args: []string{"--config=/etc/checkout/config.yaml"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
					Env:   env,
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("250m"), corev1.ResourceMemory: apiresource.MustParse("256Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("512Mi")}},
					ReadinessProbe: probe("/ready"), LivenessProbe: probe("/healthz"),
					VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/checkout", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "checkout-config"}}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return objectRef{}, err
		}
		return objectRef{p.Name, p.UID}, nil
	})
}

// createHeldWidgets creates n Widgets (gvr) in namespace ns, each
// with an operator's finalizer and 16 KiB of spec (128 entries of 128
// bytes, a resource listing what it manages): kube-apiserver answers their
// deletes with the object, marked for deletion, in JSON.
func createHeldWidgets(b *testing.B, env *itEnv, gvr schema.GroupVersionResource, ns string, n int) []objectRef {
	entries := make([]any, 128)
	for i := range entries {
		entries[i] = map[string]any{"name": fmt.Sprintf("endpoint-%03d", i), "address": fmt.Sprintf("10.%d.%d.%d", i/64, i%64, i),
			"port": int64(8000 + i), "zone": "eu-west-1" + string(rune('a'+i%3)), "weight": int64(i % 10),
			"checksum": fmt.Sprintf("%040x", i*7919)}
	}
	return createEach(b, ns, n, func(ctx context.Context, i int) (objectRef, error) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("widget-%05d", i), "finalizers": []any{"operator.example.com/cleanup"}},
			"spec":     map[string]any{"replicas": int64(3), "endpoints": entries},
		}}
		got, err := env.dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			return objectRef{}, err
		}
		return objectRef{got.GetName(), got.GetUID()}, nil
	})
}

// createEach calls create for 0..n-1, 20 at a time, and returns what they
// made in namespace ns.
func createEach(b *testing.B, ns string, n int, create func(ctx context.Context, i int) (objectRef, error)) []objectRef {
	made := make([]objectRef, n)
	g, gctx := errgroup.WithContext(b.Context())
	g.SetLimit(20)
	for i := range n {
		g.Go(func() error {
			var err error
			made[i], err = create(gctx, i)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatalf("create objects in %s: %v", ns, err)
	}
	return made
}
