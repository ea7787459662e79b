package images

import (
	"context"
	"maps"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/imageref"
	"github.com/nodegc/nodegc/pkg/cri"
)

// PodImages is what the pods bound to this node that have not finished may
// still run, as a pod source sees them now.
type PodImages struct {
	// Authoritative says the view is synced and current and the Node of
	// its name exists (the container GC's pod view rules).
	Authoritative bool
	// Reason says why it is not (a log value).
	Reason string
	// Refs maps every image reference the pods' containers name (spec
	// image, and the image ID the runtime resolved for a container that
	// ran) to one pod that names it ("namespace/name"). When the view is
	// not authoritative it holds the last pods known, if any.
	Refs map[string]string
}

// PodImageSource gives the images of the pods bound to this node that have
// not finished. The agent's is the container GC's pod informer.
type PodImageSource interface {
	PodImages() PodImages
}

// PodsMemory is what markScheduled remembers of the pod view between
// plans (Options.PodsMemory). Its zero value is ready for use.
type PodsMemory struct {
	mu sync.Mutex
	// lastAuthoritative is when the pod view was last authoritative, on the
	// wall clock as the usage records keep it (see steppedBack); zero if
	// never since start.
	lastAuthoritative time.Time
	// back is the sum of the steps back steppedBack applied: a reading of
	// the clock taken before one was applied is moved by it too.
	back time.Duration
	// refs are the references the last authoritative view gave, kept while
	// the view is not: a pod source that lost the API may have dropped
	// nothing, or everything.
	refs map[string]string
	// unresolved are the short names the runtime last failed to resolve
	// that pods still name (logged once until one resolves again).
	unresolved map[string]bool
}

// shortNames is what markScheduled asked the runtime of the short names
// (no registry) that pods name, in one plan, or in the checks of one run:
// the ID of the image each resolves to ("" when the runtime has none, or
// could not say).
type shortNames map[string]string

// steppedBack is told each step of the wall clock that a tracker applied
// to its usage records (Manager.clockStepped, and a step while the
// manager was down: Tracker.fileWatch), and moves lastAuthoritative by
// the steps back.
//
// "Arrived since the view was last authoritative" compares it with an
// image's first-detected time, which the tracker moves by every step, and
// with the runtime's arrival time, which no step moves. After a step back
// of D, left as it was it would be D later than the records' timeline,
// and an image pulled within D after the view lapsed would count as
// older than the lapse, and go. A step forward leaves it as it was:
// moved, it could be later than the arrival time of an image pulled after
// the lapse and before the step, and no longer keep that image; left, it
// is earlier than the records' timeline, which only counts more images as
// arrived since (those first seen up to the step's length before the
// lapse) until the view is authoritative again. So whichever way the
// clock steps, and whether a step is applied once or twice (two managers
// sharing the memory; a step while down counted again after a failed
// save), the rule keeps at least what it keeps without a step.
func (s *PodsMemory) steppedBack(step time.Duration) {
	if step >= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.back += step
	s.lastAuthoritative = shifted(s.lastAuthoritative, step)
}

// markScheduled marks the images that the pods bound to this node that
// have not finished may still run (keep reason KeepScheduled), matched by
// fully qualified reference (imageref.Forms) against the image's tags,
// digests and ID. Where the pod view is not authoritative nodegc protects
// more, never less: the images of the last pods known, and every image that
// arrived since the view was last authoritative (all of them, if it never
// was since the agent started). Without a pod source (no API access) the
// rule is off. It returns how it saw the pods, as Plan.PodsView says it.
//
// A short name (no registry) is also resolved by the runtime, as a pull of
// it would be (resolveShort): CRI-O follows its registries.conf, whose
// aliases may change the path too ("centos" to "quay.io/centos/centos").
// asked keeps the answers for the plan, or the run's checks: a name is
// asked once. A runtime that cannot be reached fails the marking.
func (m *Manager) markScheduled(ctx context.Context, in []Image, asked shortNames) (podsView string, err error) {
	if m.opts.Pods == nil {
		return "", nil
	}
	s := m.scheduled
	// The clock is read before the view is: whatever arrived after the
	// view was read arrived after the reading too. A step back applied
	// between the reading and its use moves it, as it moves
	// lastAuthoritative (back).
	s.mu.Lock()
	at, back := m.clock.Now(), s.back
	s.mu.Unlock()
	view := m.opts.Pods.PodImages()
	s.mu.Lock()
	refs := view.Refs
	if view.Authoritative {
		s.lastAuthoritative, s.refs = shifted(at, s.back-back), view.Refs
	} else {
		merged := make(map[string]string, len(view.Refs)+len(s.refs))
		for _, src := range []map[string]string{s.refs, view.Refs} {
			for ref, pod := range src {
				merged[ref] = pod
			}
		}
		refs = merged
	}
	since := s.lastAuthoritative
	// A short name no pod names any more is not told again.
	maps.DeleteFunc(s.unresolved, func(ref string, _ bool) bool {
		_, named := refs[ref]
		return !named
	})
	s.mu.Unlock()

	// A short name (no registry) is matched under any registry too: CRI-O
	// lists the image under the registry its registries.conf resolved the
	// name to (imageref.ShortForms). On containerd, which reads it as
	// Docker Hub's, that may keep an image of another registry by the same
	// path, never fewer. And the image the runtime resolves it to is
	// matched by ID (resolveShort), for aliases that change the path.
	forms, short := make(map[string]string, len(refs)), map[string]string{}
	for ref, pod := range refs {
		for _, f := range imageref.Forms(ref) {
			forms[f] = pod
		}
		shortForms := imageref.ShortForms(ref)
		for _, f := range shortForms {
			short[f] = pod
		}
		if len(shortForms) > 0 {
			id, err := m.resolveShort(ctx, ref, asked)
			if err != nil {
				return "", err
			}
			if id != "" {
				forms[imageref.CanonicalID(id)] = pod
			}
		}
	}
	for i := range in {
		img := &in[i]
		pod, ok := namedBy(img, forms)
		if !ok {
			pod, ok = namedWithoutRegistry(img, short)
		}
		if ok {
			img.Scheduled, img.ScheduledBy = true, "pod "+pod
			continue
		}
		if !view.Authoritative && (since.IsZero() || !img.FirstDetected.Before(since) || img.Arrived.After(since)) {
			img.Scheduled, img.ScheduledBy = true, "pod view not authoritative ("+view.Reason+"): arrived since it last was"
		}
	}
	if view.Authoritative {
		return PodsAuthoritative, nil
	}
	return view.Reason, nil
}

// resolveShort returns the ID of the image the runtime resolves ref, a
// short name, to ("" when it has none), asking it once per asked. Only a
// runtime that cannot be reached fails it: another error (a name the
// runtime's resolution refuses) is logged, once until the name resolves
// again, and the name is then matched as imageref.ShortForms says only.
func (m *Manager) resolveShort(ctx context.Context, ref string, asked shortNames) (string, error) {
	lookup, ok := m.opts.Runtime.(ImageLookup)
	if !ok {
		return "", nil
	}
	if id, ok := asked[ref]; ok {
		return id, nil
	}
	img, err := lookup.ImageStatus(ctx, ref)
	s := m.scheduled
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && (cri.IsUnavailable(err) || ctx.Err() != nil):
		return "", err
	case err != nil:
		if !s.unresolved[ref] {
			klog.FromContext(ctx).Info("The container runtime cannot resolve a short image name a pod bound to this node names; the scheduled rule matches it under any registry by its path only, so an image a registries.conf alias names another path may go",
				"reference", ref, "err", err)
			if s.unresolved == nil {
				s.unresolved = map[string]bool{}
			}
			s.unresolved[ref] = true
		}
		asked[ref] = ""
		return "", nil
	}
	delete(s.unresolved, ref)
	asked[ref] = img.GetId()
	return img.GetId(), nil
}

// namedWithoutRegistry returns the value of the first of img's names
// that, without its registry, short holds (imageref.ShortForms of
// references, to what named them), and whether there is one.
func namedWithoutRegistry(img *Image, short map[string]string) (string, bool) {
	if len(short) == 0 {
		return "", false
	}
	for _, names := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, n := range names {
			if pod, ok := short[imageref.WithoutRegistry(imageref.Normalize(n))]; ok {
				return pod, true
			}
		}
	}
	return "", false
}

// namedBy returns the value of the first of img's ID and names that forms
// holds (forms: imageref.Forms of references, to what named them), and
// whether there is one.
func namedBy(img *Image, forms map[string]string) (string, bool) {
	if len(forms) == 0 {
		return "", false
	}
	if pod, ok := forms[imageref.CanonicalID(img.ID)]; ok { // forms are sha256:HEX, CRI-O lists HEX
		return pod, true
	}
	if pod, ok := forms[img.ID]; ok {
		return pod, true
	}
	for _, names := range [][]string{img.RepoTags, img.RepoDigests} {
		for _, n := range names {
			if pod, ok := forms[imageref.Normalize(n)]; ok {
				return pod, true
			}
		}
	}
	return "", false
}
