package containers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/clockstep"
)

// listSkew is how much earlier than the start of its last list the source
// dates its view (PodView.ListedAt): a margin, so that only what was on the
// node a minute before a list and has no pod in it counts as gone (a clock
// stepped back a little, a slow request). Lists are never older than the
// moment they were asked (trackingListWatch.ListWithContext).
const listSkew = time.Minute

// APIPodSource knows which pods are bound to this node, from an informer on
// the API server (fieldSelector spec.nodeName), and whether that knowledge
// is current: synced, its last list or watch request succeeded, and the Node
// of that name exists (a second informer, fieldSelector metadata.name, as
// the kubelet's own). A name that is not the one the node's kubelet
// registered would otherwise give a synced, reachable, empty view. With
// PodSourceOptions.BootID, that Node must also report this machine's boot
// ID: a name that is another registered Node's would otherwise give a
// synced, reachable view of another machine's pods.
//
// The informers' goroutines write their caches and the fields under mu;
// View and Retain, called by the GC loop, read them.
type APIPodSource struct {
	nodeName string
	bootID   string
	pods     cache.SharedIndexInformer
	node     cache.SharedIndexInformer
	clock    clock.PassiveClock
	// monotonic is the time elapsed on a clock that is never stepped (nil
	// with a fake clock); it dates the lists against steps of clock
	// (listHealth.back).
	monotonic func() time.Duration
	// stepSampleEvery is how often Run reads the clocks between views
	// (defaultStepSampleEvery).
	stepSampleEvery time.Duration
	// stepSamples counts the readings of the clocks followSteps made, so
	// that a test can wait until one was made after a step.
	stepSamples atomic.Uint64

	mu         sync.Mutex
	podHealth  listHealth
	nodeHealth listHealth
	deleted    map[string]time.Time // UIDs the watch saw deleted, and when
	// checks is what the container GC's plans found of the views against
	// the runtime (ExpectRuntimeChecks, RuntimeChecked), which PodImages
	// goes by.
	checks runtimeChecks

	// leases reads the Node's lease (NodeLease); leaseMu guards
	// leaseRead, its last read, and is held across a read, which
	// concurrent callers then share.
	leases    coordinationv1client.LeaseInterface
	leaseMu   sync.Mutex
	leaseRead *nodeLeaseRead
	// leaseSteps are the steps of the wall clock back seen (guarded by
	// mu), which a lease's renewal made before each may look younger by
	// (NodeLease.ClockBack); stepOffset is how far the wall clock has
	// moved from the monotonic one since stepRef, as last read.
	leaseSteps              []clockStepBack
	stepRef                 time.Time
	stepRefMono, stepOffset time.Duration
}

// clockStepBack is a step of the wall clock back, by by (negative), seen
// when the monotonic clock read at.
type clockStepBack struct{ at, by time.Duration }

// runtimeChecks is what the container GC's plans found of the source's
// views against the runtime.
type runtimeChecks struct {
	expected bool // a container GC checks the views (ExpectRuntimeChecks)
	done     bool // one has checked an authoritative view since
	// verdict is the last check's: "" when the view agreed with the
	// runtime, the plan's PodsReason (RuntimeContradicts) otherwise.
	verdict string
}

// listHealth is how the list and watch requests of one informer went.
type listHealth struct {
	ok        bool      // the last list or watch request succeeded, and the watch it opened is still open
	listStart time.Time // start of the list in progress (first page)
	listedAt  time.Time // start of the last complete list
	// listStartMono and listedMono are the monotonic clock at those
	// starts; back is the furthest the wall clock was seen stepped back
	// since the last complete list began (0 or less), by which its date
	// moves back (see View); listingBack, since the list in progress
	// began.
	listStartMono, listedMono time.Duration
	back, listingBack         time.Duration
	watchGen                  uint64 // identifies the latest request; only the current watch may end health
	// listed maps the UID of each pod the last complete list returned
	// (pods only) to the static pod UID it mirrors, if any (kubernetes.io/
	// config.mirror); listing, those of the pages of the list in progress.
	// A map, once in listed, is never written again.
	listed, listing map[string]string
}

// PodSourceOptions configure an APIPodSource.
type PodSourceOptions struct {
	// NodeName is the node whose pods the source watches. Required.
	NodeName string
	// BootID is this machine's boot ID (/proc/sys/kernel/random/boot_id).
	// When set, the view is authoritative only while the Node of NodeName
	// reports it (status.nodeInfo.bootID): the name is this machine's, and
	// its kubelet has reported since this boot. Empty: not checked (the
	// name is then checked against the runtime only: Policy.Plan).
	BootID string
	// Clock dates the lists; the real clock if nil.
	Clock clock.PassiveClock
}

// NewAPIPodSource returns a source of the pods bound to opts.NodeName. Run
// must be called for it to learn anything; until then its view is not
// authoritative.
func NewAPIPodSource(client kubernetes.Interface, opts PodSourceOptions) (*APIPodSource, error) {
	nodeName, clk := opts.NodeName, opts.Clock
	if nodeName == "" {
		return nil, errors.New("pod source: the node name is required")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &APIPodSource{nodeName: nodeName, bootID: opts.BootID, clock: clk, deleted: map[string]time.Time{}, stepSampleEvery: defaultStepSampleEvery,
		leases: client.CoordinationV1().Leases(corev1.NamespaceNodeLease)}
	if _, real := clk.(clock.RealClock); real {
		s.monotonic = clockstep.Since(time.Now())
	}
	pods := client.CoreV1().Pods(metav1.NamespaceAll)
	var err error
	s.pods, err = s.informer(&corev1.Pod{}, "pods on node "+nodeName, &s.podHealth,
		fields.OneTermEqualSelector("spec.nodeName", nodeName).String(), slimPod, podUID,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return pods.List(ctx, o) },
		pods.Watch)
	if err != nil {
		return nil, err
	}
	if _, err := s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: s.onDelete}); err != nil {
		return nil, err
	}
	nodes := client.CoreV1().Nodes()
	s.node, err = s.informer(&corev1.Node{}, "node "+nodeName, &s.nodeHealth,
		fields.OneTermEqualSelector(metav1.ObjectNameField, nodeName).String(), slimNode, nil,
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return nodes.List(ctx, o) },
		nodes.Watch)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// informer builds an informer whose list and watch requests, restricted to
// selector, report to health; uid, if set, gives a listed object's UID and
// the UID it mirrors (health.listed).
func (s *APIPodSource) informer(obj runtime.Object, desc string, health *listHealth, selector string, transform cache.TransformFunc,
	uid func(runtime.Object) (string, string),
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
) (cache.SharedIndexInformer, error) {
	lw := &trackingListWatch{list: list, watch: watchFn, selector: selector, uid: uid, source: s, health: health}
	// The context-free List and Watch the interface still asks for.
	lw.ListWatch = &cache.ListWatch{ListWithContextFunc: lw.ListWithContext, WatchFuncWithContext: lw.WatchWithContext}
	inf := cache.NewSharedIndexInformerWithOptions(lw, obj, cache.SharedIndexInformerOptions{ObjectDescription: desc})
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.mu.Lock()
		health.ok = false
		s.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, err
	}
	return inf, nil
}

// Run runs the informers until ctx ends, and reads the clocks every
// stepSampleEvery (followSteps). It blocks.
func (s *APIPodSource) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.node.RunWithContext(ctx) })
	if s.monotonic != nil {
		wg.Go(func() { s.followSteps(ctx) })
	}
	s.pods.RunWithContext(ctx)
	wg.Wait()
}

// defaultStepSampleEvery is how often the source reads the clocks between
// views.
const defaultStepSampleEvery = time.Second

// followSteps reads the clocks every stepSampleEvery until ctx ends, so
// that a step of the wall clock back is seen even when it is undone before
// the next view (a mistyped date corrected, a time daemon following a bad
// source, then a good one): the views, a GC period apart, would see no
// drift between them, while what was made meanwhile is dated early. A
// step back and forth within one interval still goes unseen.
func (s *APIPodSource) followSteps(ctx context.Context) {
	t := time.NewTicker(s.stepSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			s.followBack(&s.podHealth)
			s.mu.Unlock()
			s.stepSamples.Add(1)
		}
	}
}

// HasSynced says whether the informers have listed the pods and the Node
// once.
func (s *APIPodSource) HasSynced() bool { return s.pods.HasSynced() && s.node.HasSynced() }

// listDate is the date of the last complete list, as the view gives it
// (PodView.ListedAt): its start, less listSkew, on the wall clock of now. A
// step of the wall clock back since the list began (NTP correcting a clock
// that ran fast) would otherwise make a pod bound after it, which the list
// could not return, seem to predate it; so the date moves back by the
// furthest step back seen since (the wall clock's elapsed time against
// the monotonic clock's, read at each view, when the list completes and
// every stepSampleEvery: followSteps),
// and stays there after a step forward again. A step forward, or a
// suspend (which stops the monotonic clock), does not move it: the things
// made after the list are dated later still. Called with s.mu held.
func (s *APIPodSource) listDate() time.Time {
	h := &s.podHealth
	s.followBack(h)
	return h.listedAt.Round(0).Add(h.back - listSkew)
}

// followBack lowers h.back to how far the wall clock is now behind where
// the monotonic clock says it should be, since the last complete list
// began, and h.listingBack likewise since the list in progress began.
// Called with s.mu held.
func (s *APIPodSource) followBack(h *listHealth) {
	if s.monotonic == nil {
		return
	}
	now, mono := s.clock.Now().Round(0), s.monotonic()
	s.followLeaseSteps(now, mono)
	if !h.listedAt.IsZero() {
		h.back = min(h.back, now.Sub(h.listedAt.Round(0))-(mono-h.listedMono))
	}
	if !h.listStart.IsZero() {
		h.listingBack = min(h.listingBack, now.Sub(h.listStart.Round(0))-(mono-h.listStartMono))
	}
}

// View returns which pods exist now, and whether that is known.
//
// The view is dated by the start of the last complete list as soon as that
// list returns, but the informer's cache holds the list only later: the
// reflector hands it to the informer's queue, and the informer then fills
// the cache. So a pod counts as live if the cache holds it, or if the last
// complete list returned it and the watch has not seen it deleted since: a
// pod created while the watch was down, which the relist returned, is
// never gone for a cache that has not caught up yet. Nor is a pod that
// list returned although the watch saw it deleted before the list began.
func (s *APIPodSource) View(time.Time) PodView {
	if !s.HasSynced() {
		return PodView{Node: s.nodeName, Reason: ViewNotSynced}
	}
	s.mu.Lock()
	v := PodView{Node: s.nodeName, Authoritative: s.podHealth.ok && s.nodeHealth.ok, ListedAt: s.listDate(),
		Deleted: make(map[string]bool, len(s.deleted))}
	// The last complete list's pods the watch saw deleted once that list
	// had begun: the list may predate the deletion. A deletion recorded
	// before the list began does not outweigh it: the list, never stale,
	// says the pod exists again (resourceVersions went back: an etcd
	// restore resurrected it). On the real clock the times compare by the
	// monotonic clock; a tie counts as after.
	var deletedSinceList map[string]bool
	for uid, at := range s.deleted {
		v.Deleted[uid] = true
		if _, listed := s.podHealth.listed[uid]; listed && !at.Before(s.podHealth.listedAt) {
			if deletedSinceList == nil {
				deletedSinceList = map[string]bool{}
			}
			deletedSinceList[uid] = true
		}
	}
	listed := s.podHealth.listed // never written again
	s.mu.Unlock()
	if !v.Authoritative {
		return PodView{Node: s.nodeName, Reason: ViewUnreachable}
	}
	// The Node's cache key is its name (cluster-scoped).
	obj, exists, err := s.node.GetStore().GetByKey(s.nodeName)
	if err != nil || !exists {
		return PodView{Node: s.nodeName, Reason: ViewNodeNotFound}
	}
	node, ok := obj.(*corev1.Node)
	if s.bootID != "" && (!ok || node.Status.NodeInfo.BootID != s.bootID) {
		return PodView{Node: s.nodeName, Reason: ViewNodeOtherBoot}
	}
	if ok {
		v.NodeRuntime = node.Status.NodeInfo.ContainerRuntimeVersion
		for _, c := range node.Status.Conditions {
			v.NodeReady = v.NodeReady || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
	}
	pods := s.pods.GetStore().List()
	v.Live = make(map[string]bool, max(len(pods), len(listed)))
	for uid, mirrored := range listed {
		if deletedSinceList[uid] {
			continue
		}
		v.Live[uid] = true
		if mirrored != "" {
			v.Live[mirrored] = true
		}
	}
	for _, o := range pods {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		v.Live[string(pod.UID)] = true
		// A mirror pod stands for a static pod whose UID it names.
		if uid := pod.Annotations[annotationConfigMirror]; uid != "" {
			v.Live[uid] = true
		}
		if since := runningSince(pod); !since.IsZero() {
			uid := cmp.Or(pod.Annotations[annotationConfigMirror], string(pod.UID))
			if v.Running == nil {
				v.Running = map[string]RunningPod{}
			}
			v.Running[uid] = RunningPod{PodRef: PodRef{UID: uid, Namespace: pod.Namespace, Name: pod.Name}, Since: since}
		}
	}
	return v
}

// runningSince is when the earliest of the pod's running containers
// started, as its kubelet reports it, if the pod runs: phase Running, not
// being deleted; zero otherwise. Its sandbox existed then.
func runningSince(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodRunning || Finished(pod) {
		return time.Time{}
	}
	var since time.Time
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, st := range statuses {
			if r := st.State.Running; r != nil && !r.StartedAt.IsZero() && (since.IsZero() || r.StartedAt.Time.Before(since)) {
				since = r.StartedAt.Time
			}
		}
	}
	return since
}

// Retain forgets the deletions, recorded before since, of pods that have
// nothing left on the node (onNode, a snapshot of the node that began at
// since, on the source's clock: a deletion recorded after it may be of a
// pod whose sandbox the kubelet made after the snapshot).
// A deletion is remembered as long as the pod has anything on the node,
// even once a later list no longer returns the pod: while the kubelet
// still terminates it (its sandbox ready, a container running) the view
// must know that the pod was deleted rather than never listed, or it would
// disagree with the runtime (Policy.Plan). It is also remembered as long as
// the last complete list names the pod, which View would otherwise count
// live again.
func (s *APIPodSource) Retain(onNode map[string]bool, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, at := range s.deleted {
		if _, listed := s.podHealth.listed[uid]; !onNode[uid] && !listed && at.Before(since) {
			delete(s.deleted, uid)
		}
	}
}

// podUID is a listed pod's UID and, for a mirror pod, the UID of the static
// pod it mirrors (as View reads the cache).
func podUID(obj runtime.Object) (uid, mirrored string) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return "", ""
	}
	return string(pod.UID), pod.Annotations[annotationConfigMirror]
}

func (s *APIPodSource) onDelete(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.UID == "" {
		return
	}
	s.mu.Lock()
	s.deleted[string(pod.UID)] = s.clock.Now()
	s.mu.Unlock()
}

// PodImages returns the image references of the pods bound to this node
// that have not finished (Finished), mapped to one pod that names each
// ("namespace/name"): every container's spec image (init, regular and
// ephemeral), every image volume's reference, and the image IDs the
// runtime resolved for the containers that ran and their image volumes.
// The view says whether that can be trusted; when it cannot, the
// references are those of the pods last known (the informer's cache). The
// images are read from the cache, so while it lacks a pod the view counts
// live (a relist returned it, and the cache has not caught up yet), the
// view is not authoritative (ViewCacheBehind). Nor is it while the
// container GC has not checked it against the runtime yet, or found them
// at odds the last time it checked (ExpectRuntimeChecks, RuntimeChecked).
func (s *APIPodSource) PodImages() (map[string]string, PodView) {
	view := s.View(s.clock.Now())
	refs := map[string]string{}
	cached := map[string]bool{}
	for _, o := range s.pods.GetStore().List() {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		cached[string(pod.UID)] = true
		if Finished(pod) {
			continue
		}
		name := pod.Namespace + "/" + pod.Name
		for _, c := range pod.Spec.Containers {
			refs[c.Image] = name
		}
		for _, c := range pod.Spec.InitContainers {
			refs[c.Image] = name
		}
		for _, c := range pod.Spec.EphemeralContainers {
			refs[c.Image] = name
		}
		for _, v := range pod.Spec.Volumes {
			if v.Image != nil {
				refs[v.Image.Reference] = name
			}
		}
		for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
			for _, st := range statuses {
				if st.ImageID != "" {
					refs[st.ImageID] = name
				}
				for _, m := range st.VolumeMounts {
					if m.VolumeStatus != nil && m.VolumeStatus.Image != nil {
						refs[m.VolumeStatus.Image.ImageRef] = name
					}
				}
			}
		}
	}
	delete(refs, "")
	if !view.Authoritative {
		return refs, view
	}
	s.mu.Lock()
	listed := s.podHealth.listed // never written again
	checks := s.checks
	s.mu.Unlock()
	switch {
	case checks.expected && !checks.done:
		return refs, PodView{Node: s.nodeName, Reason: ViewRuntimeUnchecked}
	case checks.verdict != "":
		return refs, PodView{Node: s.nodeName, Reason: checks.verdict}
	}
	for uid := range listed {
		if !cached[uid] && view.Live[uid] { // counted live from the list
			return refs, PodView{Node: s.nodeName, Reason: ViewCacheBehind}
		}
	}
	return refs, view
}

// ExpectRuntimeChecks says that a container GC checks this source's views
// against the runtime it lists (Policy.Plan: a wrong node name, another
// runtime than the kubelet's) and reports each check with RuntimeChecked.
// Until its first report, PodImages is not authoritative
// (ViewRuntimeUnchecked): the image GC would otherwise trust, at the
// agent's start, a view the first plan is about to refuse. A new container
// GC (one built again for a runtime that came back as another) checks
// anew. NewManager calls it.
func (s *APIPodSource) ExpectRuntimeChecks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks.expected, s.checks.done = true, false
}

// RuntimeChecked records what a container GC plan found of an
// authoritative view against the runtime: reason is "" when they agree,
// the plan's PodsReason when it contradicts the view (RuntimeContradicts)
// or when the plan found the Node's lease stale (ViewNodeLeaseStale: read
// only by plans that would remove something as pod gone).
// PodImages is not authoritative, with that reason, from a report of a
// contradiction until a report of agreement: the image GC does not trust
// the pods of a view the container GC refuses (another Node's, on nodes
// that share one boot ID; the pods of a runtime that is not the one
// listed). A plan whose view was not authoritative checked nothing, and
// is not reported.
func (s *APIPodSource) RuntimeChecked(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks.done, s.checks.verdict = true, reason
}

// Finished says whether a pod will run no container again: it succeeded or
// failed, or it is being deleted (the kubelet stops its containers and
// starts none).
func Finished(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// slimPod keeps only what the source reads, so that the cache stays small:
// the pod's identity, the mirror annotation, its phase and deletion, the
// images its containers name (for the image GC), and when each running
// container started (PodView.Running).
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		DeletionTimestamp: pod.DeletionTimestamp,
	}}
	if m := pod.Annotations[annotationConfigMirror]; m != "" {
		slim.Annotations = map[string]string{annotationConfigMirror: m}
	}
	slim.Status.Phase = pod.Status.Phase
	if Finished(pod) {
		return slim, nil
	}
	images := func(cs []corev1.Container) []corev1.Container {
		var out []corev1.Container
		for _, c := range cs {
			out = append(out, corev1.Container{Name: c.Name, Image: c.Image})
		}
		return out
	}
	slim.Spec.Containers = images(pod.Spec.Containers)
	slim.Spec.InitContainers = images(pod.Spec.InitContainers)
	for _, c := range pod.Spec.EphemeralContainers {
		slim.Spec.EphemeralContainers = append(slim.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: c.Name, Image: c.Image}})
	}
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			slim.Spec.Volumes = append(slim.Spec.Volumes, corev1.Volume{Name: v.Name,
				VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: v.Image.Reference}}})
		}
	}
	imageIDs := func(ss []corev1.ContainerStatus) []corev1.ContainerStatus {
		var out []corev1.ContainerStatus
		for _, st := range ss {
			slimSt := corev1.ContainerStatus{Name: st.Name, ImageID: st.ImageID}
			if r := st.State.Running; r != nil && !r.StartedAt.IsZero() {
				slimSt.State.Running = &corev1.ContainerStateRunning{StartedAt: r.StartedAt}
			}
			for _, m := range st.VolumeMounts {
				if m.VolumeStatus != nil && m.VolumeStatus.Image != nil {
					slimSt.VolumeMounts = append(slimSt.VolumeMounts, corev1.VolumeMountStatus{Name: m.Name,
						VolumeStatus: &corev1.VolumeStatus{Image: &corev1.ImageVolumeStatus{ImageRef: m.VolumeStatus.Image.ImageRef}}})
				}
			}
			if slimSt.ImageID != "" || len(slimSt.VolumeMounts) > 0 || slimSt.State.Running != nil {
				out = append(out, slimSt)
			}
		}
		return out
	}
	slim.Status.ContainerStatuses = imageIDs(pod.Status.ContainerStatuses)
	slim.Status.InitContainerStatuses = imageIDs(pod.Status.InitContainerStatuses)
	slim.Status.EphemeralContainerStatuses = imageIDs(pod.Status.EphemeralContainerStatuses)
	return slim, nil
}

// slimNode keeps only the Node's identity: the source needs to know that it
// exists, which boot of which machine its kubelet last reported, which
// container runtime, and whether the Node is Ready (its Ready condition
// alone).
func slimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{BootID: node.Status.NodeInfo.BootID,
			ContainerRuntimeVersion: node.Status.NodeInfo.ContainerRuntimeVersion}}}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			slim.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// trackingListWatch lists and watches one resource (the node's pods, or
// the Node) and records how each request went in health: a complete list
// dates it and makes it healthy, a failed request makes it unhealthy until
// one succeeds, a watch that ends makes it unhealthy until the next one
// opens.
type trackingListWatch struct {
	*cache.ListWatch
	list     func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watch    func(context.Context, metav1.ListOptions) (watch.Interface, error)
	selector string
	uid      func(runtime.Object) (string, string) // nil: the list's UIDs are not kept
	source   *APIPodSource
	health   *listHealth // guarded by source.mu
}

var (
	_ cache.ListerWatcher            = (*trackingListWatch)(nil)
	_ cache.ListerWatcherWithContext = (*trackingListWatch)(nil)
)

// IsWatchListSemanticsUnSupported makes the reflector list and then watch,
// rather than stream the initial list over a watch: the start of a LIST is
// what dates the view.
func (lw *trackingListWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (lw *trackingListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	s, h := lw.source, lw.health
	opts.FieldSelector = lw.selector
	// Fresh lists only. The reflector asks its first list with
	// resourceVersion "0" (any version: the API server's watch cache, which
	// can lag etcd by minutes behind a stalled watch) and relists with the
	// last version it saw (not older than that, which can still lag now).
	// A pod missing from a list would count as gone once its things on the
	// node are older than the list: its containers, sandbox and logs
	// removed while it exists. So the list asks for a version not older
	// than etcd's current one, read first with a consistent list of one
	// object of the resource (no selector: one key read). The watch cache
	// answers it once it has caught up, whole (no limit: a list with a
	// limit and a version goes to etcd on API servers before 1.31, and
	// etcd has no index on spec.nodeName, so it would read every pod).
	// Later pages of a list carry their version in the continue token.
	// The list is dated from before the version is read: it answers as of
	// that version, and a pod created while the read waits is missing.
	if opts.Continue == "" {
		s.mu.Lock()
		h.listStart, h.listStartMono, h.listingBack = s.clock.Now(), 0, 0
		if s.monotonic != nil {
			h.listStartMono = s.monotonic()
		}
		s.mu.Unlock()
		rv, err := lw.currentVersion(ctx)
		if err != nil {
			s.mu.Lock()
			h.watchGen++
			h.ok = false
			s.mu.Unlock()
			return nil, fmt.Errorf("reading the current resourceVersion: %w", err)
		}
		opts.ResourceVersion, opts.ResourceVersionMatch, opts.Limit = rv, metav1.ResourceVersionMatchNotOlderThan, 0
	}
	list, err := lw.list(ctx, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	h.watchGen++ // a watch still ending now must not undo this list
	if opts.Continue == "" {
		h.listing = map[string]string{}
	}
	if err != nil {
		h.ok = false
		return list, err
	}
	if lw.uid != nil && h.listing != nil {
		if err := meta.EachListItem(list, func(o runtime.Object) error {
			if uid, mirrored := lw.uid(o); uid != "" {
				h.listing[uid] = mirrored
			}
			return nil
		}); err != nil {
			h.listing = nil // this list cannot count: the view keeps the last one's date
		}
	}
	if m, merr := meta.ListAccessor(list); merr == nil && m.GetContinue() == "" && h.listing != nil { // the last page
		h.ok = true
		h.listedAt, h.listedMono, h.listed = h.listStart, h.listStartMono, h.listing
		h.listing, h.back = nil, h.listingBack // a step back seen while it was read
		s.followBack(h)
	}
	return list, nil
}

// currentVersion returns etcd's current resourceVersion, from a
// consistent list of at most one object of the resource, in every
// namespace, without selector.
func (lw *trackingListWatch) currentVersion(ctx context.Context) (string, error) {
	list, err := lw.list(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	if m.GetResourceVersion() == "" {
		return "", errors.New("the list has no resourceVersion")
	}
	return m.GetResourceVersion(), nil
}

func (lw *trackingListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s, h := lw.source, lw.health
	opts.FieldSelector = lw.selector
	w, err := lw.watch(ctx, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	h.watchGen++
	if err != nil {
		h.ok = false
		return nil, err
	}
	h.ok = !h.listedAt.IsZero()
	tw := &trackedWatch{inner: w, ch: make(chan watch.Event), stopped: make(chan struct{}), gen: h.watchGen, source: s, health: h}
	go tw.forward()
	return tw, nil
}

// trackedWatch passes a watch's events on and marks its health bad when the
// watch ends or reports an error, unless a newer request has been made.
type trackedWatch struct {
	inner   watch.Interface
	ch      chan watch.Event
	stopped chan struct{}
	once    sync.Once
	gen     uint64
	source  *APIPodSource
	health  *listHealth // guarded by source.mu
}

func (w *trackedWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *trackedWatch) Stop() {
	w.once.Do(func() {
		close(w.stopped)
		w.inner.Stop()
	})
}

func (w *trackedWatch) forward() {
	defer close(w.ch)
	defer w.ended()
	for ev := range w.inner.ResultChan() {
		if ev.Type == watch.Error {
			w.ended()
		}
		select {
		case w.ch <- ev:
		case <-w.stopped:
			return
		}
	}
}

func (w *trackedWatch) ended() {
	s := w.source
	s.mu.Lock()
	if w.health.watchGen == w.gen {
		w.health.ok = false
	}
	s.mu.Unlock()
}
