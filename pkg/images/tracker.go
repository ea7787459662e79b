package images

import (
	"hash/maphash"
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
	// lastListing is the container listing the map was last set from,
	// sorted by entry hash, and lastDigest its fingerprint; eventsSince says
	// whether events changed the map after it. Runtimes list in no stable
	// order (containerd: map order), so listings are compared by hash.
	lastListing []listedEntry
	lastIDs     []string // the container ID of each lastListing entry
	lastDigest  listingDigest
	seeds       [2]maphash.Seed
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
	return &Tracker{dir: dir, usage: usage, containers: map[string]*trackedContainer{}, refs: map[string]int{}, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}, warning
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

// setContainersLocked replaces the container set with a listing. A listing
// with the same entries as the last one (in any order) and no event since
// changes nothing and costs one hash per entry. Otherwise, when the map is
// still exactly the last listing (no event since), only the entries that
// differ between the two listings are looked up: both are kept sorted by
// entry hash and merged. After events, or when two entries of a listing
// share a hash, every entry is looked up and the ones not listed dropped.
func (t *Tracker) setContainersLocked(containers []*runtimeapi.Container) {
	entries, digest := hashListing(t.seeds, containers)
	if !t.eventsSince && digest == t.lastDigest {
		return
	}
	entries = sortByHash(entries)
	if t.eventsSince || t.lastListing == nil || hasDuplicateHash(entries) {
		t.replaceContainersLocked(containers)
	} else {
		t.applyListingDiffLocked(containers, entries)
	}
	ids := make([]string, len(entries))
	for i := range entries {
		ids[i] = containers[entries[i].idx].GetId()
	}
	t.eventsSince = false
	t.lastListing, t.lastIDs, t.lastDigest = entries, ids, digest
}

// replaceContainersLocked looks every listed container up and drops the
// ones not listed.
func (t *Tracker) replaceContainersLocked(containers []*runtimeapi.Container) {
	t.generation++
	for _, c := range containers {
		t.setContainerLocked(c.GetId(), listedRefs(c))
	}
	for id, tc := range t.containers {
		if tc.generation != t.generation {
			t.removeContainerLocked(id)
		}
	}
}

// applyListingDiffLocked applies the difference between the last listing
// (which the map holds exactly) and entries, both sorted by hash: entries
// only in the last listing are removed first, then entries only in the new
// one are set (a container whose image references changed is in both).
func (t *Tracker) applyListingDiffLocked(containers []*runtimeapi.Container, entries []listedEntry) {
	old := t.lastListing
	var added []int32
	i, j := 0, 0
	for i < len(old) || j < len(entries) {
		switch {
		case j == len(entries) || (i < len(old) && old[i].h[0] < entries[j].h[0]):
			t.removeContainerLocked(t.lastIDs[i])
			i++
		case i == len(old) || old[i].h[0] > entries[j].h[0]:
			added = append(added, entries[j].idx)
			j++
		case old[i].h[1] != entries[j].h[1]: // a different entry under the same first hash
			t.removeContainerLocked(t.lastIDs[i])
			added = append(added, entries[j].idx)
			i++
			j++
		default:
			i++
			j++
		}
	}
	for _, k := range added {
		c := containers[k]
		t.setContainerLocked(c.GetId(), listedRefs(c))
	}
}

func listedRefs(c *runtimeapi.Container) imageRefs {
	return imageRefs{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()}
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

// listedEntry is one entry of a container listing: a 128-bit hash of the
// container ID and image references (two 64-bit hashes under seeds chosen at
// random per process) and its index in the listing.
type listedEntry struct {
	h   [2]uint64
	idx int32
}

// listingDigest fingerprints a whole listing independently of its order:
// its length and the sums of its entries' hashes.
type listingDigest struct {
	n      int
	h0, h1 uint64
}

func hashListing(seeds [2]maphash.Seed, containers []*runtimeapi.Container) ([]listedEntry, listingDigest) {
	entries := make([]listedEntry, len(containers))
	d := listingDigest{n: len(containers)}
	var hs [2]maphash.Hash
	hs[0].SetSeed(seeds[0])
	hs[1].SetSeed(seeds[1])
	for k, c := range containers {
		e := &entries[k]
		e.idx = int32(k)
		for n := range hs {
			h := &hs[n]
			h.Reset()
			h.WriteString(c.GetId())
			for _, r := range listedRefs(c) {
				h.WriteByte(0)
				h.WriteString(r)
			}
			e.h[n] = h.Sum64()
		}
		d.h0 += e.h[0]
		d.h1 += e.h[1]
	}
	return entries, d
}

// sortByHash sorts entries by their first hash: an LSD radix sort, a few
// times faster than a comparison sort on tens of thousands of entries. It
// returns the sorted slice (entries or a buffer of the same length).
func sortByHash(entries []listedEntry) []listedEntry {
	buf := make([]listedEntry, len(entries))
	src, dst := entries, buf
	for shift := 0; shift < 64; shift += 8 {
		var count [256]int
		for k := range src {
			count[byte(src[k].h[0]>>shift)]++
		}
		pos := 0
		for d := range count {
			pos, count[d] = pos+count[d], pos
		}
		for k := range src {
			d := byte(src[k].h[0] >> shift)
			dst[count[d]] = src[k]
			count[d]++
		}
		src, dst = dst, src
	}
	return src
}

// hasDuplicateHash reports whether two entries of a sorted listing share
// their first hash: then the listing is applied entry by entry.
func hasDuplicateHash(sorted []listedEntry) bool {
	for k := 1; k < len(sorted); k++ {
		if sorted[k].h[0] == sorted[k-1].h[0] {
			return true
		}
	}
	return false
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
