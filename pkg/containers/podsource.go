package containers

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ListSkew is how much earlier than the start of its last list the source
// dates its view (PodView.ListedAt): the API server may answer a list from
// a cache a little behind etcd, so a pod created just before the list may be
// missing from it.
const ListSkew = time.Minute

// APIPodSource knows which pods are bound to this node, from an informer on
// the API server (fieldSelector spec.nodeName), and whether that knowledge
// is current: synced, and its last list or watch request succeeded.
//
// The informer's goroutines write the cache and the fields under mu; View
// and Retain, called by the GC loop, read them.
type APIPodSource struct {
	informer cache.SharedIndexInformer
	clock    clock.PassiveClock

	mu        sync.Mutex
	healthy   bool                 // the last list or watch request succeeded, and the watch it opened is still open
	listStart time.Time            // start of the list in progress (first page)
	listedAt  time.Time            // start of the last complete list
	watchGen  uint64               // identifies the latest request; only the current watch may end health
	deleted   map[string]time.Time // UIDs the watch saw deleted, and when
}

// NewAPIPodSource returns a source of the pods bound to nodeName. Run must be
// called for it to learn anything; until then its view is not authoritative.
func NewAPIPodSource(client kubernetes.Interface, nodeName string, clk clock.PassiveClock) (*APIPodSource, error) {
	if nodeName == "" {
		return nil, errors.New("pod source: the node name is required")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &APIPodSource{clock: clk, deleted: map[string]time.Time{}}
	lw := &trackingListWatch{
		client:   client,
		selector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
		source:   s,
	}
	// The context-free List and Watch the interface still asks for.
	lw.ListWatch = &cache.ListWatch{ListWithContextFunc: lw.ListWithContext, WatchFuncWithContext: lw.WatchWithContext}
	s.informer = cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{
		ObjectDescription: "pods on node " + nodeName,
	})
	if err := s.informer.SetTransform(slimPod); err != nil {
		return nil, err
	}
	if err := s.informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.setHealthy(false)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return nil, err
	}
	if _, err := s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: s.onDelete}); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the informer until ctx ends. It blocks.
func (s *APIPodSource) Run(ctx context.Context) { s.informer.RunWithContext(ctx) }

// HasSynced says whether the informer has listed the pods once.
func (s *APIPodSource) HasSynced() bool { return s.informer.HasSynced() }

// View returns which pods exist now, and whether that is known.
func (s *APIPodSource) View(time.Time) PodView {
	if !s.informer.HasSynced() {
		return PodView{Reason: ViewNotSynced}
	}
	s.mu.Lock()
	v := PodView{Authoritative: s.healthy, ListedAt: s.listedAt.Add(-ListSkew), Deleted: make(map[string]bool, len(s.deleted))}
	for uid := range s.deleted {
		v.Deleted[uid] = true
	}
	s.mu.Unlock()
	if !v.Authoritative {
		return PodView{Reason: ViewUnreachable}
	}
	pods := s.informer.GetStore().List()
	v.Live = make(map[string]bool, len(pods))
	for _, o := range pods {
		pod, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		v.Live[string(pod.UID)] = true
		// A mirror pod stands for a static pod whose UID it names.
		if uid := pod.Annotations[AnnotationConfigMirror]; uid != "" {
			v.Live[uid] = true
		}
	}
	return v
}

// Retain forgets the deletions of pods that have nothing left on the node,
// and those that a complete list made after them covers.
func (s *APIPodSource) Retain(onNode map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	covered := s.listedAt.Add(-ListSkew)
	for uid, at := range s.deleted {
		if !onNode[uid] || at.Before(covered) {
			delete(s.deleted, uid)
		}
	}
}

func (s *APIPodSource) setHealthy(ok bool) {
	s.mu.Lock()
	s.healthy = ok
	s.mu.Unlock()
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

// slimPod keeps only what the source reads, so that the cache stays small.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
	}}
	if m := pod.Annotations[AnnotationConfigMirror]; m != "" {
		slim.Annotations = map[string]string{AnnotationConfigMirror: m}
	}
	return slim, nil
}

// trackingListWatch lists and watches the node's pods and tells the source
// how each request went: a complete list dates the view and makes it
// healthy, a failed request makes it unhealthy until one succeeds, a watch
// that ends makes it unhealthy until the next one opens.
type trackingListWatch struct {
	*cache.ListWatch
	client   kubernetes.Interface
	selector string
	source   *APIPodSource
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
	s := lw.source
	opts.FieldSelector = lw.selector
	start := s.clock.Now()
	list, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchGen++ // a watch still ending now must not undo this list
	if opts.Continue == "" {
		s.listStart = start
	}
	switch {
	case err != nil:
		s.healthy = false
	case list.Continue == "": // the last page
		s.healthy = true
		s.listedAt = s.listStart
	}
	return list, err
}

func (lw *trackingListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s := lw.source
	opts.FieldSelector = lw.selector
	w, err := lw.client.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchGen++
	if err != nil {
		s.healthy = false
		return nil, err
	}
	s.healthy = !s.listedAt.IsZero()
	tw := &trackedWatch{inner: w, ch: make(chan watch.Event), stopped: make(chan struct{}), gen: s.watchGen, source: s}
	go tw.forward()
	return tw, nil
}

// trackedWatch passes a watch's events on and marks the source unhealthy
// when the watch ends or reports an error, unless a newer watch has opened.
type trackedWatch struct {
	inner   watch.Interface
	ch      chan watch.Event
	stopped chan struct{}
	once    sync.Once
	gen     uint64
	source  *APIPodSource
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
	if s.watchGen == w.gen {
		s.healthy = false
	}
	s.mu.Unlock()
}
