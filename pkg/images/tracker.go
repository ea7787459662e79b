package images

import (
	"maps"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Tracker knows, for every image the runtime has, when nodegc first saw it
// and when a container last used it, and which images the runtime's
// containers reference now. It is fed by full listings (Reconcile) and by the
// container event stream (ObserveEvent), and read by planning (Images,
// InUse).
//
// One mutex guards the whole structure: the event watcher, the periodic
// reconciliation and the GC run all go through it, each call being short.
type Tracker struct {
	mu    sync.Mutex
	dir   string
	usage map[string]Usage
	// containers maps a container ID to the references to its image the
	// runtime gave (image ID, image ref, image spec); refs counts, for every
	// reference, the containers giving it. In use means: any of an image's
	// names is in refs.
	containers map[string]*trackedContainer
	refs       map[string]int
	// generation numbers Reconcile calls, to find containers that are gone.
	generation uint64
	// lastListing is the container listing the map was last set from, and
	// eventsSince says whether events changed the map after it: an identical
	// listing with no event since leaves the map as it is, without a lookup.
	lastListing []listedContainer
	eventsSince bool
	// names resolves an image tag or digest to the image ID; built when an
	// event needs it, from the image listing of the last Reconcile.
	names      map[string]string
	lastImages []*runtimeapi.Image
	dirty      bool
}

// NewTracker loads the usage records kept in dir. A corrupt state file is set
// aside: the tracker then starts empty and the returned warning says so.
func NewTracker(dir string, now time.Time) (t *Tracker, warning error) {
	usage, warning := loadState(dir, now)
	return &Tracker{dir: dir, usage: usage, containers: map[string]*trackedContainer{}, refs: map[string]int{}}, warning
}

// Reconcile brings the tracker in line with a full listing of the runtime's
// images and containers, taken at now: images seen for the first time get
// FirstDetected = now, images referenced by a container (in any state) get
// LastUsed = now, and records of images that are gone are dropped.
func (t *Tracker) Reconcile(images []*runtimeapi.Image, containers []*runtimeapi.Container, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setContainersLocked(containers)
	refs := t.refs
	t.names, t.lastImages = nil, images
	for _, img := range images {
		id := img.GetId()
		u, known := t.usage[id]
		changed := !known
		if !known {
			u = Usage{FirstDetected: now}
		}
		if usedBy(img, refs) && u.LastUsed.Before(now) {
			u.LastUsed = now
			changed = true
		}
		if changed {
			t.usage[id] = u
			t.dirty = true
		}
	}
	// Every listed image has a record now; more records than images means
	// some images are gone. (Only then is the listing indexed.)
	if len(t.usage) > len(images) {
		present := make(map[string]bool, len(images))
		for _, img := range images {
			present[img.GetId()] = true
		}
		for id := range t.usage {
			if !present[id] {
				delete(t.usage, id)
				t.dirty = true
			}
		}
	}
}

// ReconcileContainers replaces what the tracker knows of containers with a
// fresh listing taken at now, and marks the known images they use as used
// at now. Images are left as the last Reconcile saw them.
func (t *Tracker) ReconcileContainers(containers []*runtimeapi.Container, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setContainersLocked(containers)
	for _, tc := range t.containers {
		t.touchLocked(tc.refs, now)
	}
}

// setContainersLocked replaces the container set. It updates entries in
// place: on a busy node most containers are the same from one listing to
// the next, and lookups are cheaper than inserts.
func (t *Tracker) setContainersLocked(containers []*runtimeapi.Container) {
	if !t.eventsSince && sameListing(t.lastListing, containers) {
		return
	}
	t.eventsSince = false
	t.lastListing = t.lastListing[:0]
	for _, c := range containers {
		t.lastListing = append(t.lastListing, listedContainer{id: c.GetId(), refs: imageRefs{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()}})
	}
	t.generation++
	for _, c := range containers {
		t.setContainerLocked(c.GetId(), imageRefs{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()})
	}
	for id, tc := range t.containers {
		if tc.generation != t.generation {
			t.removeContainerLocked(id)
		}
	}
}

// ObserveEvent applies one CRI container event: the containers it reports
// reference their images from then on, a deleted container stops doing so,
// and the images involved count as used at the event's time.
func (t *Tracker) ObserveEvent(ev *runtimeapi.ContainerEventResponse) {
	at := time.Unix(0, ev.GetCreatedAt())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.eventsSince = true
	deleted := ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	if deleted {
		if tc, ok := t.containers[ev.GetContainerId()]; ok {
			t.touchLocked(tc.refs, at)
		}
		t.removeContainerLocked(ev.GetContainerId())
	}
	for _, st := range ev.GetContainersStatuses() {
		refs := imageRefs{st.GetImageRef(), st.GetImageId(), st.GetImage().GetImage()}
		if !deleted || st.GetId() != ev.GetContainerId() {
			t.setContainerLocked(st.GetId(), refs)
		}
		t.touchLocked(refs, at)
	}
}

// imageRefs are the references a container gives to its image; empty
// strings are absent ones.
type imageRefs [3]string

// resolveLocked returns the ID of the known image that ref (an ID, tag or
// digest) names.
func (t *Tracker) resolveLocked(ref string) (string, bool) {
	if ref == "" {
		return "", false
	}
	if _, ok := t.usage[ref]; ok {
		return ref, true
	}
	if t.names == nil {
		t.names = make(map[string]string, len(t.lastImages)*2)
		for _, img := range t.lastImages {
			for _, n := range img.GetRepoTags() {
				t.names[n] = img.GetId()
			}
			for _, n := range img.GetRepoDigests() {
				t.names[n] = img.GetId()
			}
		}
	}
	id, ok := t.names[ref]
	return id, ok
}

// listedContainer is one entry of a container listing.
type listedContainer struct {
	id   string
	refs imageRefs
}

// sameListing reports whether containers is, entry by entry, the listing
// last applied: runtimes list in a stable order, so on a quiet node a plain
// comparison replaces tens of thousands of map lookups.
func sameListing(last []listedContainer, containers []*runtimeapi.Container) bool {
	if len(last) != len(containers) || len(last) == 0 {
		return false
	}
	for i, c := range containers {
		l := &last[i]
		if l.id != c.GetId() || l.refs != (imageRefs{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()}) {
			return false
		}
	}
	return true
}

// trackedContainer is what the tracker keeps of one container.
type trackedContainer struct {
	refs       imageRefs
	generation uint64
}

// setContainerLocked records that container id references refs, keeping the
// reference counts exact.
func (t *Tracker) setContainerLocked(id string, refs imageRefs) {
	tc, ok := t.containers[id]
	if !ok {
		tc = &trackedContainer{}
		t.containers[id] = tc
	} else if tc.refs == refs {
		tc.generation = t.generation
		return
	}
	t.countLocked(tc.refs, -1)
	tc.refs, tc.generation = refs, t.generation
	t.countLocked(refs, +1)
}

func (t *Tracker) removeContainerLocked(id string) {
	if tc, ok := t.containers[id]; ok {
		delete(t.containers, id)
		t.countLocked(tc.refs, -1)
	}
}

func (t *Tracker) countLocked(refs imageRefs, delta int) {
	for _, r := range refs {
		if r == "" {
			continue
		}
		if t.refs[r] += delta; t.refs[r] <= 0 {
			delete(t.refs, r)
		}
	}
}

// touchLocked sets LastUsed = at on the known images the references name.
func (t *Tracker) touchLocked(refs imageRefs, at time.Time) {
	for _, r := range refs {
		id, ok := t.resolveLocked(r)
		if !ok {
			continue
		}
		if u, ok := t.usage[id]; ok && u.LastUsed.Before(at) {
			u.LastUsed = at
			t.usage[id] = u
			t.dirty = true
		}
	}
}

// Images joins a listing of the runtime's images with what the tracker
// knows into the planner's input. Images the tracker has not seen yet count
// as first detected now (so the minimum age protects them).
func (t *Tracker) Images(images []*runtimeapi.Image, now time.Time) []Image {
	t.mu.Lock()
	defer t.mu.Unlock()
	refs := t.refs
	out := make([]Image, 0, len(images))
	for _, img := range images {
		u, ok := t.usage[img.GetId()]
		if !ok {
			u = Usage{FirstDetected: now}
		}
		out = append(out, Image{
			ID:            img.GetId(),
			RepoTags:      img.GetRepoTags(),
			RepoDigests:   img.GetRepoDigests(),
			Size:          img.GetSize(),
			Pinned:        img.GetPinned(),
			InUse:         usedBy(img, refs),
			FirstDetected: u.FirstDetected,
			LastUsed:      u.LastUsed,
		})
	}
	return out
}

// InUse reports whether a container the tracker knows references the image
// (by ID, tag or digest).
func (t *Tracker) InUse(img *Image) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return anyNameIn(t.refs, img.ID, img.RepoTags, img.RepoDigests)
}

// Forget drops the record of an image nodegc removed, so that the same
// image pulled again counts as first detected then, not when it was first
// seen before its removal.
func (t *Tracker) Forget(imageID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.usage[imageID]; ok {
		delete(t.usage, imageID)
		t.dirty = true
	}
}

// Usage returns a copy of the usage records.
func (t *Tracker) Usage() map[string]Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.usage)
}

// Save writes the usage records to the state directory if they changed.
func (t *Tracker) Save() error {
	t.mu.Lock()
	if !t.dirty {
		t.mu.Unlock()
		return nil
	}
	snapshot := maps.Clone(t.usage)
	t.dirty = false
	t.mu.Unlock()
	if err := saveState(t.dir, snapshot); err != nil {
		t.mu.Lock()
		t.dirty = true
		t.mu.Unlock()
		return err
	}
	return nil
}

func usedBy(img *runtimeapi.Image, refs map[string]int) bool {
	return anyNameIn(refs, img.GetId(), img.GetRepoTags(), img.GetRepoDigests())
}

func anyNameIn(refs map[string]int, id string, tags, digests []string) bool {
	if refs[id] > 0 {
		return true
	}
	for _, n := range tags {
		if refs[n] > 0 {
			return true
		}
	}
	for _, n := range digests {
		if refs[n] > 0 {
			return true
		}
	}
	return false
}
