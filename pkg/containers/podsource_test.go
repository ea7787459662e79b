package containers

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// The informer side of APIPodSource runs against a real kube-apiserver in
// TestPodGoneWithAPIServer; these are the parts that need none.

func TestAPIPodSourceBeforeRun(t *testing.T) {
	if _, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{}); err == nil {
		t.Error("NewAPIPodSource accepted an empty node name")
	}
	s, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{NodeName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if v := s.View(t0); v.Authoritative || v.Reason != ViewNotSynced {
		t.Errorf("view before Run = %+v, want not synced", v)
	}
}

func TestAPIPodSourceRemembersDeletions(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: k8stypes.UID("uid-" + uid)}}
	}
	s.podHealth.listedAt = t0.Add(-time.Hour) // as a complete list would have set it
	s.onDelete(pod("a"))
	s.onDelete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: pod("b")})
	s.onDelete("not a pod")
	clk.Step(time.Minute)
	s.onDelete(pod("c"))
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-b": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("deletions (-want +got):\n%s", diff)
	}
	// Pods with nothing left on the node are forgotten.
	s.Retain(map[string]bool{"uid-a": true, "uid-c": true}, clk.Now())
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("after Retain (-want +got):\n%s", diff)
	}
	// A later complete list does not make the source forget a deletion
	// while the pod has something on the node: the kubelet may still be
	// terminating it, and the view must not take it for a pod it never
	// listed.
	s.podHealth.listedAt = t0.Add(listSkew + 30*time.Second)
	s.Retain(map[string]bool{"uid-a": true, "uid-c": true}, clk.Now())
	if diff := cmp.Diff(map[string]time.Time{"uid-a": t0, "uid-c": t0.Add(time.Minute)}, s.deleted); diff != "" {
		t.Errorf("after a newer list (-want +got):\n%s", diff)
	}
	if v := s.View(t0); v.Node != "n1" {
		t.Errorf("view of node %q, want n1", v.Node)
	}
}

// TestRetainKeepsDeletionsSinceTheSnapshot: a pod's sandbox was made right
// after a run's snapshot of the node, then the pod was deleted, before the
// run's Retain: the snapshot does not show the pod on the node, but the
// deletion came after it, so it is kept. The next run sees the pod's
// sandbox and the deletion says it is gone. (Before, Retain forgot it, and
// the pod's sandbox, containers and log directory, newer than the last
// list, stayed until a relist.)
func TestRetainKeepsDeletionsSinceTheSnapshot(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	snapshot := clk.Now()
	clk.Step(time.Second)
	s.onDelete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "ns", UID: "uid-late"}})
	s.Retain(map[string]bool{}, snapshot)
	if _, ok := s.deleted["uid-late"]; !ok {
		t.Fatal("the deletion of a pod deleted after the snapshot was forgotten")
	}
	// The next run's snapshot, later than the deletion, shows the pod on
	// the node: still remembered; once it has nothing left, forgotten.
	clk.Step(time.Second)
	s.Retain(map[string]bool{"uid-late": true}, clk.Now())
	if _, ok := s.deleted["uid-late"]; !ok {
		t.Fatal("the deletion of a pod with something on the node was forgotten")
	}
	s.Retain(map[string]bool{}, clk.Now())
	if _, ok := s.deleted["uid-late"]; ok {
		t.Error("the deletion of a pod with nothing left, deleted before the snapshot, is remembered")
	}
}

func TestSlimNodeKeepsItsIdentity(t *testing.T) {
	in := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", ResourceVersion: "7", Labels: map[string]string{"kubernetes.io/hostname": "n1"}},
		Status:     corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1 << 30}}},
	}
	got, err := slimNode(in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid", ResourceVersion: "7"}}, got); diff != "" {
		t.Errorf("slimNode (-want +got):\n%s", diff)
	}
}

func TestSlimPodKeepsWhatTheSourceReads(t *testing.T) {
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: "mirror-uid", ResourceVersion: "42",
			Labels:      map[string]string{"tier": "control-plane"},
			Annotations: map[string]string{annotationConfigMirror: "static-uid", "other": "x"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}},
	}
	got, err := slimPod(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-n1", Namespace: "kube-system", UID: "mirror-uid", ResourceVersion: "42",
		Annotations: map[string]string{annotationConfigMirror: "static-uid"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slimPod (-want +got):\n%s", diff)
	}
	if got, _ := slimPod("tombstone"); got != "tombstone" {
		t.Errorf("slimPod changed a non-pod: %v", got)
	}
}

// TestSlimPodKeepsImagesOfUnfinishedPods: the cache keeps the images a pod
// that has not finished names (its containers' and its image volumes', as
// the spec writes them and as the status resolved them), and nothing else
// of its spec and status; a finished pod keeps none.
func TestSlimPodKeepsImagesOfUnfinishedPods(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox", Command: []string{"sleep", "60"}}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx:1.27", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "debian"}}},
			Volumes: []corev1.Volume{
				{Name: "models", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
					Reference: "registry.example/models:v3", PullPolicy: corev1.PullIfNotPresent}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Message: "long", InitContainerStatuses: []corev1.ContainerStatus{
			{Name: "init", Image: "busybox", ImageID: "docker.io/library/busybox@sha256:1111", VolumeMounts: []corev1.VolumeMountStatus{
				{Name: "models", MountPath: "/models", ReadOnly: true, VolumeStatus: &corev1.VolumeStatus{
					Image: &corev1.ImageVolumeStatus{ImageRef: "registry.example/models@sha256:2222"}}},
				{Name: "tmp", MountPath: "/tmp"},
			}},
		}},
	}
	got, err := slimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers:     []corev1.Container{{Name: "app", Image: "nginx:1.27"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "debian"}}},
			Volumes: []corev1.Volume{{Name: "models", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{
				Reference: "registry.example/models:v3"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ImageID: "docker.io/library/busybox@sha256:1111",
				VolumeMounts: []corev1.VolumeMountStatus{{Name: "models", VolumeStatus: &corev1.VolumeStatus{
					Image: &corev1.ImageVolumeStatus{ImageRef: "registry.example/models@sha256:2222"}}}}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slim pending pod (-want +got):\n%s", diff)
	}
	now := metav1.Now()
	for name, finish := range map[string]func(*corev1.Pod){
		"succeeded": func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"failed":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
		"deleted":   func(p *corev1.Pod) { p.DeletionTimestamp = &now },
	} {
		p := pod.DeepCopy()
		finish(p)
		got, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := got.(*corev1.Pod); len(s.Spec.Containers)+len(s.Spec.InitContainers)+len(s.Spec.Volumes)+len(s.Status.InitContainerStatuses) > 0 || !Finished(s) {
			t.Errorf("%s pod: the cache keeps its images (%+v) or no longer knows it finished", name, s.Spec)
		}
	}
}

// TestPodImagesNamesImageVolumes: the images of a pod that has not
// finished include its image volumes', as the spec names them and as the
// status resolved them (Kubernetes 1.35's ImageVolumeWithDigest); a
// finished pod's are not.
func TestPodImagesNamesImageVolumes(t *testing.T) {
	s, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{NodeName: "n1", Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	volumePod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name)},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "registry.example/" + name + "/app:1"}},
				Volumes: []corev1.Volume{{Name: "models", VolumeSource: corev1.VolumeSource{
					Image: &corev1.ImageVolumeSource{Reference: "registry.example/" + name + "/models:v3"}}}},
			},
			Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
				VolumeMounts: []corev1.VolumeMountStatus{{Name: "models", VolumeStatus: &corev1.VolumeStatus{
					Image: &corev1.ImageVolumeStatus{ImageRef: "registry.example/" + name + "/models@sha256:2222"}}}}}}},
		}
	}
	for _, p := range []*corev1.Pod{volumePod("running", corev1.PodRunning), volumePod("done", corev1.PodSucceeded)} {
		slim, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.pods.GetStore().Add(slim); err != nil {
			t.Fatal(err)
		}
	}
	refs, _ := s.PodImages()
	want := map[string]string{
		"registry.example/running/app:1":              "ns/running",
		"registry.example/running/models:v3":          "ns/running",
		"registry.example/running/models@sha256:2222": "ns/running",
	}
	if diff := cmp.Diff(want, refs); diff != "" {
		t.Errorf("PodImages (-want +got):\n%s", diff)
	}
}

// TestDeletionOutlivesAFailedLogScan: a pod whose only remains on the node
// are its log directory stays remembered as deleted when a run cannot read
// the pod logs directory: the run's snapshot lacks the log directories, so
// it cannot tell that the pod still has something on the node, and it must
// not make the source forget (the directory would then be kept as pod_live
// until a relist dates it).
func TestDeletionOutlivesAFailedLogScan(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, err := NewAPIPodSource(fake.NewClientset(), PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s.onDelete(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"}})
	root := t.TempDir()
	notADir := filepath.Join(root, "pods")
	touch(t, notADir) // a regular file: reading it as a directory fails
	cfg := config.Defaulted().ContainerGC
	cfg.PodLogsDirectory, cfg.ContainerLogsDirectory = notADir, filepath.Join(root, "containers")
	m, err := NewManager(Options{Config: cfg, Runtime: newFakeRuntime(), Pods: s, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GarbageCollect(t.Context(), TriggerManual); err == nil {
		t.Fatal("GarbageCollect read a regular file as the pod logs directory")
	}
	s.mu.Lock()
	_, remembered := s.deleted["uid-p"]
	s.mu.Unlock()
	if !remembered {
		t.Error("a run that could not read the pod logs directory made the source forget a deleted pod")
	}
}

// TestRelistCountsBeforeTheCacheHoldsIt: after a relist, the view is dated
// by the new list as soon as the list returns, but the informer's cache
// holds the list only once it has been queued and processed. Pod p was
// created while the watch was down (its sandbox and containers are two
// hours old): the relist returns it, and the view must count it live from
// then on, not take it for gone because the cache has not caught up. The
// cache's catching up is held back here, deterministically, in the
// informer's transform of p.
func TestRelistCountsBeforeTheCacheHoldsIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	h := startHeldSource(t, client, clk)
	s, watches, hold, held, first := h.s, h.watches, &h.hold, h.held, h.first

	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	if err := client.Tracker().Add(p); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	// The watch ends as one that was down too long does: the reflector lists again.
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the relist did not reach pod p")
	}
	onNode := t0.Add(-2 * time.Hour)
	v := s.View(t0)
	if !v.Authoritative || !v.ListedAt.Equal(t0.Add(-listSkew)) {
		t.Fatalf("view after the relist returned: authoritative %t (%s), listed at %v; want authoritative, %v", v.Authoritative, v.Reason, v.ListedAt, t0.Add(-listSkew))
	}
	if v.Gone("uid-p", onNode) {
		t.Error("pod p, which the relist returned, is gone while the cache has not caught up with the list")
	}
	// The image GC reads the pods' images from the cache: while it lacks
	// a pod the list returned, what the pods may run is not known.
	if refs, v := s.PodImages(); v.Authoritative || v.Reason != ViewCacheBehind {
		t.Errorf("PodImages while the cache lacks pod p: authoritative %t (%q), images %v; want not authoritative (%q)", v.Authoritative, v.Reason, refs, ViewCacheBehind)
	}

	h.releaseP()
	testbed.WaitFor(t, 30*time.Second, "the cache to hold pod p", func() bool { _, ok, _ := s.pods.GetStore().GetByKey("ns/p"); return ok })
	if v := s.View(t0); v.Gone("uid-p", onNode) {
		t.Error("pod p is gone once the cache holds it")
	}
	if refs, v := s.PodImages(); !v.Authoritative || refs["registry.example/app:1"] != "ns/p" {
		t.Errorf("PodImages once the cache holds pod p: authoritative %t (%q), images %v; want authoritative, with p's image", v.Authoritative, v.Reason, refs)
	}

	// The new watch sees p deleted; once p has nothing left on the node
	// the source may forget the deletion, but not count p live again
	// because the last list returned it.
	var second *watch.RaceFreeFakeWatcher
	select {
	case second = <-watches:
	case <-time.After(30 * time.Second):
		t.Fatal("no watch after the relist")
	}
	second.Delete(p)
	testbed.WaitFor(t, 30*time.Second, "the source to see pod p deleted", func() bool { return s.View(t0).Deleted["uid-p"] })
	s.Retain(map[string]bool{}, clk.Now())
	if v := s.View(t0); v.Live["uid-p"] {
		t.Error("pod p is live again once its deletion was forgotten")
	}
	if refs, v := s.PodImages(); !v.Authoritative {
		t.Errorf("PodImages after pod p was deleted: authoritative %t (%q), images %v; want authoritative", v.Authoritative, v.Reason, refs)
	}
}

// TestListAfterADeletionCountsThePodLive: the watch saw pod p deleted, and
// a list begun an hour later returns p again (resourceVersions went back:
// an etcd restore resurrected the pod; the tracker keeps p, as the restored
// etcd does). That list says p exists: until the cache holds p the view
// counts it live from the list, as any pod a relist returned, and PodImages
// is not authoritative (the cache lacks its images). Only a deletion
// recorded once the list had begun (the list may predate it) outweighs the
// list.
func TestListAfterADeletionCountsThePodLive(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, p)
	h := startHeldSource(t, client, clk)
	s, hold, held, first := h.s, &h.hold, h.held, h.first
	onNode := t0.Add(-2 * time.Hour)

	// Deleted after the first list began (at the same instant, on the
	// fake clock): the list may predate the deletion, which outweighs it.
	first.Delete(p)
	testbed.WaitFor(t, 30*time.Second, "the source to see pod p deleted", func() bool { return s.View(t0).Deleted["uid-p"] })
	if v := s.View(t0); !v.Authoritative || !v.Gone("uid-p", onNode) {
		t.Fatalf("pod p, deleted once the list that returned it had begun: authoritative %t (%q), gone %t; want gone",
			v.Authoritative, v.Reason, v.Gone("uid-p", onNode))
	}

	clk.Step(time.Hour) // the restore
	hold.Store(true)
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the relist did not reach pod p")
	}
	v := s.View(clk.Now())
	if !v.Authoritative || !v.ListedAt.Equal(clk.Now().Add(-listSkew)) {
		t.Fatalf("view after the relist returned: authoritative %t (%s), listed at %v; want authoritative, %v", v.Authoritative, v.Reason, v.ListedAt, clk.Now().Add(-listSkew))
	}
	if v.Gone("uid-p", onNode) {
		t.Error("pod p, which a list begun an hour after its deletion returned, is gone while the cache has not caught up with that list")
	}
	if refs, v := s.PodImages(); v.Authoritative || v.Reason != ViewCacheBehind {
		t.Errorf("PodImages while the cache lacks pod p: authoritative %t (%q), images %v; want not authoritative (%q)", v.Authoritative, v.Reason, refs, ViewCacheBehind)
	}

	h.releaseP()
	testbed.WaitFor(t, 30*time.Second, "the cache to hold pod p", func() bool { _, ok, _ := s.pods.GetStore().GetByKey("ns/p"); return ok })
	if refs, v := s.PodImages(); !v.Authoritative || refs["registry.example/app:1"] != "ns/p" {
		t.Errorf("PodImages once the cache holds pod p: authoritative %t (%q), images %v; want authoritative, with p's image", v.Authoritative, v.Reason, refs)
	}
}

// TestStaleListMakesNoPodGone: a list asked with resourceVersion "0" (any
// version: what an informer's first list asks, to be answered from the API
// server's watch cache) may come from a cache minutes behind etcd, as an
// API server whose watch has stalled answers. Pod p, finished and still in
// the API, is missing from such a list; the watch, opened at the stale
// list's version, delivers nothing yet. Had the view taken that list as
// fact, p would be gone: its sandbox and containers are older than the
// list, and nothing was seen deleted. The source reads etcd's current
// version first (a consistent list of one object) and lists not older than
// that, which the watch cache answers only once it has caught up.
func TestStaleListMakesNoPodGone(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-p"},
		Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, p)
	var lists []string
	var mu sync.Mutex
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).ListOptions
		mu.Lock()
		lists = append(lists, fmt.Sprintf("rv=%q match=%q limit=%d", o.ResourceVersion, o.ResourceVersionMatch, o.Limit))
		mu.Unlock()
		switch {
		case o.ResourceVersion == "" && o.Limit == 1: // consistent: etcd's current version
			return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}, nil
		case o.ResourceVersion == "0": // any version: a cache that does not hold p yet
			return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		default: // not older than a version: the cache waits until it holds p
			return false, nil, nil
		}
	})
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewRaceFreeFake(), nil // the stalled watch: nothing arrives
	})
	s, _ := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", Clock: clk})
	clk.Step(3 * time.Minute)
	v := s.View(clk.Now())
	if !v.Authoritative {
		t.Fatalf("view not authoritative (%s); the test needs one that is", v.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if finished := t0.Add(-2 * time.Minute); v.Gone("uid-p", finished) {
		t.Errorf("pod p, in the API, is gone in the view (lists asked: %q)", lists)
	}
}

// TestListDatedBeforeItsVersion: the list is dated from before the read of
// the version it is not older than. That read (a consistent list of one
// object) can wait in the API server's queue or on a slow etcd; a pod
// created meanwhile is missing from the list, which answers as of the
// version. Dated after that read, the list would seem to postdate the pod,
// and a stalled watch would leave it gone. Before, a read that took 2
// minutes dated the list 2 minutes late.
func TestListDatedBeforeItsVersion(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o := a.(k8stesting.ListActionImpl).ListOptions; o.ResourceVersion == "" && o.Limit == 1 {
			clk.Step(2 * time.Minute) // a slow read of the current version
			return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}, nil
		}
		return false, nil, nil
	})
	s, _ := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", Clock: clk})
	v := s.View(clk.Now())
	if !v.Authoritative {
		t.Fatalf("view not authoritative (%s); the test needs one that is", v.Reason)
	}
	if want := t0.Add(-listSkew); v.ListedAt.After(want) {
		t.Errorf("the list is dated %v, want no later than %v (its start, before the version was read, less the skew)", v.ListedAt, want)
	}
}

// TestListDateFollowsStepsBack: the wall clock steps ten minutes back after
// the pod list (NTP correcting a clock that ran fast): a pod bound after
// the step, which the list could not return, has things dated before the
// list's start as the clock read it, so the list's date moves back by the
// step, and stays there after a step forward again. A suspend (the
// monotonic clock stops while the wall clock goes on) or a step forward
// does not move it into the future: what was made after the list and
// before the suspend would then seem to predate it. Before, a step back
// left the date where it was, and with a stalled watch the things of a pod
// bound after it were removed while it existed.
func TestListDateFollowsStepsBack(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	s, mono := steppedSource(t, fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}), clk)
	runSynced(t, s)
	step := func(wall, monotonic time.Duration) {
		clk.Step(wall)
		mono.Add(int64(monotonic))
	}
	listed := t0.Add(-listSkew) // the list began at t0
	for _, tc := range []struct {
		name       string
		wall, mono time.Duration
		want       time.Time
	}{
		{"a minute later", time.Minute, time.Minute, listed},
		{"ten minutes back", -10*time.Minute + time.Minute, time.Minute, listed.Add(-10 * time.Minute)},
		{"ten minutes forward again", 10*time.Minute + time.Minute, time.Minute, listed.Add(-10 * time.Minute)},
		{"suspended for eight hours", 8 * time.Hour, 0, listed.Add(-10 * time.Minute)},
	} {
		step(tc.wall, tc.mono)
		if got := s.View(clk.Now()).ListedAt; !got.Equal(tc.want) {
			t.Errorf("%s: the list is dated %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestListDateSeesAStepUndoneBetweenViews: the wall clock steps ten
// minutes back and, before the GC's next view, ten minutes forward again
// (a mistyped date corrected, a time daemon following a bad source then a
// good one): things made meanwhile carry dates ten minutes early, so the
// list's date must move back by the step, though two views a period apart
// see no drift between them. Once while the pods are listed, once after.
// The source reads the clocks every stepSampleEvery, between views too.
// Before, only views and the list's end read them: the step went unseen,
// and a pod bound during it, which a stalled watch had not delivered, was
// gone while it existed.
func TestListDateSeesAStepUndoneBetweenViews(t *testing.T) {
	for _, during := range []bool{false, true} {
		name := "after the list"
		if during {
			name = "during the list"
		}
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
			s, _ := steppedSource(t, client, clk)
			s.stepSampleEvery = time.Millisecond
			// excursion steps the wall clock ten minutes back and, once the
			// source has read the clocks after the step, forward again. A
			// reading counted one after the step may have read the clock
			// before it; the next one began after. It may run on an
			// informer's goroutine (a reactor): it reports with Errorf.
			excursion := func() {
				clk.Step(-10 * time.Minute)
				from := s.stepSamples.Load()
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				if err := testbed.Poll(ctx, time.Millisecond, func(context.Context) (bool, error) {
					return s.stepSamples.Load() >= from+2, nil
				}); err != nil {
					t.Errorf("the source did not read the clocks after the step back (%d readings before it, %d since): %v", from, s.stepSamples.Load()-from, err)
				}
				clk.Step(10 * time.Minute)
			}
			var once sync.Once
			if during {
				client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if o := a.(k8stesting.ListActionImpl).ListOptions; o.ResourceVersion == "" && o.Limit == 1 {
						once.Do(excursion) // while the version is read
					}
					return false, nil, nil
				})
			}
			runSynced(t, s)
			if !during {
				excursion()
			}
			want := t0.Add(-listSkew - 10*time.Minute)
			if got := s.View(clk.Now()).ListedAt; !got.Equal(want) {
				t.Errorf("after a step of ten minutes back and forward again, the list is dated %v, want %v", got, want)
			}
		})
	}
}

// steppedSource is a source of node n1's pods on clk, whose monotonic
// clock is the returned counter (a step of clk does not move it).
func steppedSource(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock) (*APIPodSource, *atomic.Int64) {
	t.Helper()
	s, err := NewAPIPodSource(client, PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	mono := new(atomic.Int64)
	s.monotonic = func() time.Duration { return time.Duration(mono.Load()) }
	return s, mono
}

// TestViewNeedsThisMachinesBoot: with this machine's boot ID given, the view
// is authoritative only while the Node of its name reports that boot ID. A
// name that another registered Node has (its kubelet reports its own boot),
// or a Node whose kubelet has not reported since this machine booted (the
// old boot ID, or none yet), gives node_other_boot: otherwise every pod
// here would look gone, even on a node where nothing runs to show the
// runtime disagrees. Without a boot ID given, it is not checked.
func TestViewNeedsThisMachinesBoot(t *testing.T) {
	node := func(bootID string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: bootID}}}
	}
	for _, tc := range []struct {
		name, local, reported, want string
	}{
		{"this boot", "boot-a", "boot-a", "authoritative"},
		{"another machine's Node", "boot-a", "boot-b", ViewNodeOtherBoot},
		{"no boot reported yet", "boot-a", "", ViewNodeOtherBoot},
		{"not checked", "", "boot-b", "authoritative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(node(tc.reported))
			s, ctx := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", BootID: tc.local, Clock: clocktesting.NewFakeClock(t0)})
			reason := func() string {
				if v := s.View(t0); !v.Authoritative {
					return v.Reason
				}
				return "authoritative"
			}
			if got := reason(); got != tc.want {
				t.Fatalf("Node reports boot %q, this machine's %q: view %q, want %q", tc.reported, tc.local, got, tc.want)
			}
			if tc.want != ViewNodeOtherBoot {
				return
			}
			// The kubelet reports this boot: the view follows the Node.
			if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node(tc.local), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for reason() != "authoritative" {
				if time.Now().After(deadline) {
					t.Fatalf("the Node reports this machine's boot: view %q, want authoritative", reason())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestViewTellsTheNodesRuntime: the view says which container runtime the
// Node's kubelet reports, as the Node says it now, for the plan to check
// against the runtime it lists (ViewNodeOtherRuntime).
func TestViewTellsTheNodesRuntime(t *testing.T) {
	node := func(runtime string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-a", ContainerRuntimeVersion: runtime}}}
	}
	client := fake.NewClientset(node("containerd://1.7.23-k3s2"))
	s, ctx := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", BootID: "boot-a", Clock: clocktesting.NewFakeClock(t0)})
	if v := s.View(t0); !v.Authoritative || v.NodeRuntime != "containerd://1.7.23-k3s2" {
		t.Fatalf("view: authoritative %v (%s), Node's runtime %q; want true, %q", v.Authoritative, v.Reason, v.NodeRuntime, "containerd://1.7.23-k3s2")
	}
	// The runtime upgraded in place, the kubelet reports it.
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node("containerd://1.7.24-k3s1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.View(t0).NodeRuntime != "containerd://1.7.24-k3s1" {
		if time.Now().After(deadline) {
			t.Fatalf("the Node reports containerd://1.7.24-k3s1: view says %q", s.View(t0).NodeRuntime)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPodImagesGoByTheRuntimeChecks: the image GC trusts no view the
// container GC has not checked against the runtime, or refused: once a
// container GC expects to check (at the agent's start, and again when it is
// built for another runtime), PodImages is not authoritative until it
// reports a check (runtime_unchecked), nor from a report that the runtime
// contradicts the view until one that they agree. Without a container GC,
// nothing is checked and PodImages goes by the view alone.
func TestPodImagesGoByTheRuntimeChecks(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: "boot-a"}}}
	s, _ := runSyncedSource(t, fake.NewClientset(node), PodSourceOptions{NodeName: "n1", BootID: "boot-a", Clock: clocktesting.NewFakeClock(t0)})
	reason := func() string {
		if _, v := s.PodImages(); !v.Authoritative {
			return v.Reason
		}
		return "authoritative"
	}
	for _, step := range []struct {
		name string
		do   func()
		want string
	}{
		{"no container GC", func() {}, "authoritative"},
		{"a container GC starts", s.ExpectRuntimeChecks, ViewRuntimeUnchecked},
		{"it finds the runtime contradicts the view", func() { s.RuntimeChecked(ViewDisagrees) }, ViewDisagrees},
		{"and another way", func() { s.RuntimeChecked(ViewRuntimeLacksPods) }, ViewRuntimeLacksPods},
		{"then that they agree", func() { s.RuntimeChecked("") }, "authoritative"},
		{"a container GC built again for another runtime", s.ExpectRuntimeChecks, ViewRuntimeUnchecked},
		{"that runtime is not the Node's", func() { s.RuntimeChecked(ViewNodeOtherRuntime) }, ViewNodeOtherRuntime},
		{"a container GC built again", s.ExpectRuntimeChecks, ViewRuntimeUnchecked},
		{"agrees", func() { s.RuntimeChecked("") }, "authoritative"},
	} {
		step.do()
		if got := reason(); got != step.want {
			t.Errorf("%s: PodImages %s, want %s", step.name, got, step.want)
		}
		if v := s.View(t0); !v.Authoritative {
			t.Errorf("%s: View not authoritative (%s): the container GC's plan makes its checks itself", step.name, v.Reason)
		}
	}
}

// runSyncedSource makes a pod source on client, runs it until the test
// ends, and returns it once its informers synced, with the context it runs
// in.
func runSyncedSource(t *testing.T, client *fake.Clientset, opts PodSourceOptions) (*APIPodSource, context.Context) {
	t.Helper()
	s, err := NewAPIPodSource(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, runSynced(t, s)
}

// runSynced runs s until the test ends, and waits until it has synced.
func runSynced(t *testing.T, s *APIPodSource) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
		t.Fatal("the informers did not sync")
	}
	return ctx
}

// heldSource is a pod source on a fake client whose watches are the
// test's (watches), started and synced, whose informer's transform of pod
// uid-p blocks, once hold is set, until releaseP: the cache's catching up
// with a list is held back, deterministically. first is the first watch.
type heldSource struct {
	s       *APIPodSource
	watches chan *watch.RaceFreeFakeWatcher
	hold    atomic.Bool
	held    chan struct{} // closed when the transform of uid-p blocks
	first   *watch.RaceFreeFakeWatcher

	release     chan struct{}
	releaseOnce sync.Once
}

func (h *heldSource) releaseP() { h.releaseOnce.Do(func() { close(h.release) }) }

func startHeldSource(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock) *heldSource {
	t.Helper()
	h := &heldSource{watches: make(chan *watch.RaceFreeFakeWatcher, 8), held: make(chan struct{}), release: make(chan struct{})}
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake() // not the tracker's: what happens to pods meanwhile is not told
		h.watches <- w
		return true, w, nil
	})
	s, err := NewAPIPodSource(client, PodSourceOptions{NodeName: "n1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	if err := s.pods.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.UID == "uid-p" && h.hold.CompareAndSwap(true, false) {
			close(h.held)
			<-h.release
		}
		return slimPod(obj)
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		h.releaseP()
		cancel()
		<-done
	})
	if !cache.WaitForCacheSync(ctx.Done(), s.HasSynced) {
		t.Fatal("the informers did not sync")
	}
	h.first = <-h.watches
	return h
}

// TestViewHoldsThePodsTheKubeletRuns: the view's Running holds the pods the
// kubelet reports running (phase Running, not being deleted, a container
// running), each since its earliest running container started, by the UID
// the runtime's sandboxes carry (a mirror pod's: the static pod's); the
// cache keeps of each status only that start.
func TestViewHoldsThePodsTheKubeletRuns(t *testing.T) {
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(-d).Truncate(time.Second)) }
	runningSince := func(name string, d time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Image: "img", ImageID: "img@sha256:1", RestartCount: 3,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(d)}}}
	}
	waiting := corev1.ContainerStatus{Name: "crashy", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at(3 * time.Hour)}}}
	pod := func(name string, phase corev1.PodPhase, mutate func(*corev1.Pod), statuses ...corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name)},
			Spec:   corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: phase, StartTime: ptrTime(at(5 * time.Hour)), ContainerStatuses: statuses}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	deleting := metav1.NewTime(t0)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		pod("web", corev1.PodRunning, nil, runningSince("app", time.Hour), runningSince("side", 2*time.Hour), waiting),
		pod("sidecar", corev1.PodRunning, func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{runningSince("proxy", 4*time.Hour)}
		}, runningSince("app", 3*time.Hour)),
		pod("etcd-n1", corev1.PodRunning, func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotationConfigMirror: "static-uid"}
		}, runningSince("etcd", 6*time.Hour)),
		pod("crashing", corev1.PodRunning, nil, waiting),
		pod("pending", corev1.PodPending, nil, runningSince("app", time.Hour)), // as a kubelet never reports it
		pod("stopping", corev1.PodRunning, func(p *corev1.Pod) { p.DeletionTimestamp = &deleting }, runningSince("app", time.Hour)),
		pod("done", corev1.PodSucceeded, nil),
	)
	s, _ := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", Clock: clocktesting.NewFakeClock(t0)})
	v := s.View(t0)
	if !v.Authoritative {
		t.Fatalf("view not authoritative: %q", v.Reason)
	}
	ref := func(uid, name string, d time.Duration) RunningPod {
		return RunningPod{PodRef: PodRef{UID: uid, Namespace: "ns", Name: name}, Since: at(d).Time}
	}
	want := map[string]RunningPod{
		"uid-web":     ref("uid-web", "web", 2*time.Hour),
		"uid-sidecar": ref("uid-sidecar", "sidecar", 4*time.Hour),
		"static-uid":  ref("static-uid", "etcd-n1", 6*time.Hour),
	}
	if diff := cmp.Diff(want, v.Running); diff != "" {
		t.Errorf("running pods (-want +got):\n%s", diff)
	}
	slim, err := slimPod(pod("web", corev1.PodRunning, nil, runningSince("app", time.Hour), waiting))
	if err != nil {
		t.Fatal(err)
	}
	wantStatuses := []corev1.ContainerStatus{{Name: "app", ImageID: "img@sha256:1",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(time.Hour)}}}}
	if diff := cmp.Diff(wantStatuses, slim.(*corev1.Pod).Status.ContainerStatuses); diff != "" {
		t.Errorf("slim statuses (-want +got):\n%s", diff)
	}
	if st := slim.(*corev1.Pod).Status.StartTime; st != nil {
		t.Errorf("the cache keeps the pod's start time %v", st)
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }

// TestForceDeletedPodStuckRunningAfterARestart: a pod hung on a lost NFS
// server was force-deleted; its container runs on (the kubelet cannot stop
// a process in uninterruptible sleep) and nodegc restarted since, so its
// fresh pod source never saw the deletion. The pod it lists (web) runs in
// this runtime, and the kubelet of the Ready Node reports it running, which
// shows the view is this node's: the plan keeps the
// view authoritative, names the stuck pod, keeps it as running, collects
// the finished and deleted pod (fin), and the image GC may trust the view
// (PodImages). Before, the view was refused as another node's
// (disagrees_with_runtime) for as long as the pod stayed stuck: nothing
// went as pod_gone, and the restarted agent's image GC removed no image.
func TestForceDeletedPodStuckRunningAfterARestart(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web"},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(-5 * time.Hour))}}}}}},
		nodeLease("n1", t0.Add(-5*time.Second), 40))
	gets := countLeaseGets(client)
	src, _ := runSyncedSource(t, client, PodSourceOptions{NodeName: "n1", Clock: clocktesting.NewFakeClock(t0)})
	rt := newFakeRuntime()
	for _, pod := range []string{"web", "stuck"} {
		rt.addSandbox(with(sbx(pod, 0, true, 5*time.Hour), func(s *Sandbox) { s.PodUID = "uid-" + pod }))
		rt.addContainer(with(ctr(pod, "app", 0, StateRunning, 5*time.Hour), func(c *Container) { c.PodUID = "uid-" + pod }), "")
	}
	rt.addSandbox(with(sbx("fin", 0, false, 5*time.Hour), func(s *Sandbox) { s.PodUID = "uid-fin" }))
	rt.addContainer(with(dead("fin", "app", 0, 5*time.Hour), func(c *Container) { c.PodUID = "uid-fin" }), "")
	cfg := config.Defaulted().ContainerGC
	cfg.PodLogsDirectory, cfg.ContainerLogsDirectory = filepath.Join(t.TempDir(), "pods"), filepath.Join(t.TempDir(), "containers")
	m, err := NewManager(Options{Config: cfg, Runtime: rt, Pods: src, Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := m.Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !plan.PodsAuthoritative || len(plan.PodsMissing) != 1 || plan.PodsMissing[0].UID != "uid-stuck" {
		t.Errorf("plan's view: authoritative %t (%s), missing %v; want authoritative, the stuck pod named", plan.PodsAuthoritative, plan.PodsReason, plan.PodsMissing)
	}
	if diff := cmp.Diff([]string{"fin/app/0:pod_gone", "fin/sb0:pod_gone"}, planIDs(plan)); diff != "" {
		t.Errorf("removals (-want +got):\n%s", diff)
	}
	if _, v := src.PodImages(); !v.Authoritative {
		t.Errorf("PodImages' view not authoritative (%s): the image GC would remove nothing", v.Reason)
	}
	// The kubelet renews the Node's lease: its read is what let the
	// pod vouch, once; the next plan, within nodeLeaseCacheFor, shares it.
	if _, err := m.Plan(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("two plans read the node lease %d times; want once", n)
	}
}
