package images

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/clockstep"
)

// Tracker knows, for every image the runtime has, when nodegc first saw it
// and when a container last used it, and which images the runtime's
// containers reference now. It is fed by listings (syncContainers,
// applyImages) and by the container event stream (observeEvent), and
// read by planning (planInput, inUse). Outside this package a Tracker only
// reads: NewTracker loads a state directory's records and Usage returns
// them; the Manager's own tracker (Manager.Tracker) is fed by its loops.
//
// One mutex (mu) guards the whole structure: the event reader, the
// periodic reconciliation and the GC run all go through it, each call being
// short; no runtime call is made under it, so the event reader never waits
// for one. A second mutex (listing) is held for the whole of a container
// listing, runtime call included, so that listings are taken and applied
// one at a time, in order.
type Tracker struct {
	listing  sync.Mutex
	mu       sync.Mutex
	dir      string
	node     string // the node the records describe, saved with them
	readOnly bool
	usage    map[string]Usage
	// watchedSince is when nodegc began to watch the node's containers
	// without a break (watch.continuousSince): a use before it may have gone
	// unseen. clock dates each write (the watch's last known time).
	watchedSince time.Time
	clock        func() time.Time
	// boot reads the boot clock for each write (nil: unknown).
	boot func() bootReading
	// steps finds steps of clock (followLocked, under mu), onStep is told
	// each.
	steps  clockstep.Follower
	onStep func(step time.Duration)
	// forward is the sum of the steps forward followLocked applied
	// (recordsNow.forward).
	forward time.Duration
	// fileWatch is the watch the state file recorded when loaded.
	fileWatch watch
	// containers maps a container ID to the references to its image the
	// runtime gave (image ID, image ref, image spec); refs counts, for every
	// reference, the containers giving it. In use means: any of an image's
	// names is in refs. A container the runtime gives no ID of its own
	// (none, or one another container of the same listing or event has
	// too: the runtime misbehaves) is kept under sharedKey instead, so
	// that every container keeps its image.
	containers map[string]*trackedContainer
	refs       map[string]int
	// generation numbers full applications of a listing, to find containers
	// that are gone.
	generation uint64
	// seq orders container events and the starts of listings on one
	// timeline: each event and each listing start takes the next number.
	// applied is the start of the newest listing applied; tombstones maps
	// the containers a DELETED event removed to that event's number, until
	// a listing begun after it has been applied.
	seq        uint64
	applied    uint64
	tombstones map[string]uint64
	// lastListing is the container listing the map was last set from,
	// sorted by entry hash, and lastDigest its fingerprint; eventsSince says
	// whether the map may differ from it (events since, or events newer
	// than that listing, which it kept). Runtimes list in no stable
	// order (containerd: map order), so listings are compared by hash.
	lastListing []listedEntry
	lastIDs     []string // the container ID of each lastListing entry
	lastDigest  listingDigest
	seeds       [2]maphash.Seed
	eventsSince bool
	// lastFaults are the containers lastListing gave no ID of their own;
	// onFaults is told of each listing and event that gives such
	// containers (under mu).
	lastFaults idFaults
	onFaults   func(source string, f idFaults)
	// names resolves an image tag or digest to the image ID; built when an
	// event needs it, from the image listing of the last applyImages.
	names      map[string]string
	lastImages []*runtimeapi.Image
	// pending keeps the uses events reported of references no known image
	// has (an image pulled since the last image listing): the next image
	// listing begun after the event applies them (see reconcileImages).
	pending map[string]pendingUse
	// imagesApplied is the start of the newest image listing applied.
	imagesApplied uint64
	// dirty says the records differ from the state file and are to be
	// saved; lagging that they differ only by last-used times less than
	// lastUsedSaveStep past the file's (onDisk: each image's last-used time
	// as the file holds it), saved with the next write or at shutdown.
	dirty, lagging bool
	onDisk         map[string]time.Time
	saving         sync.Mutex // held while writing the state file
	// unknown is signalled when an event or a container listing names an
	// image the tracker does not know, changed when the records change (see
	// unknownImages and recordsChanged).
	unknown, changed chan struct{}
}

// pendingUse is the latest use events reported of an unresolved image
// reference, and the number of the last such event.
type pendingUse struct {
	at  time.Time
	seq uint64
}

// NewTracker loads the usage records kept in dir, whatever node they were
// written for. A corrupt state file is set aside: the tracker then starts
// empty and the returned warning says so.
func NewTracker(dir string, now time.Time) (t *Tracker, warning error) {
	return newTracker(dir, now, false, "")
}

// newTracker with readOnly never writes to dir: a corrupt state file is
// left in place and save does nothing. node names the node the records
// describe: a state file of another node is set aside (loadState), and
// saves name node.
func newTracker(dir string, now time.Time, readOnly bool, node string) (*Tracker, error) {
	return newTrackerAt(dir, now, readOnly, node, nil)
}

// newTrackerAt is newTracker on a machine whose boot clock boot reads (nil:
// unknown): the state file is read as of its reading now (loadStateAt),
// and each save records it.
func newTrackerAt(dir string, now time.Time, readOnly bool, node string, boot func() bootReading) (*Tracker, error) {
	var at bootReading
	if boot != nil {
		at = boot()
	}
	usage, stamp, file, warning := loadStateAt(dir, now, readOnly, node, at)
	since := file.continuousSince(now)
	return &Tracker{dir: dir, node: node, readOnly: readOnly, usage: usage, watchedSince: since, fileWatch: file, clock: time.Now, boot: boot,
		// A new watch is written soon, so that the file (and `nodegc
		// plan`, which reads it) does not go on with the old one; so are
		// records moved by a step of the clock while nodegc was down.
		dirty: stamp || !since.Equal(file.since) || file.shift != 0, onDisk: lastUses(usage), containers: map[string]*trackedContainer{}, refs: map[string]int{},
		tombstones: map[string]uint64{}, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		pending: map[string]pendingUse{}, unknown: make(chan struct{}, 1), changed: make(chan struct{}, 1)}, warning
}

// unknownImages is signalled when a container event or listing names an
// image the tracker does not know (pulled since the last image listing):
// list the images then (syncImages), so that the use is dated from then on
// to the event. Signals coalesce: one pending signal stands for any number
// of events.
func (t *Tracker) unknownImages() <-chan struct{} { return t.unknown }

// recordsChanged is signalled when the usage records change; save writes them.
// Signals coalesce.
func (t *Tracker) recordsChanged() <-chan struct{} { return t.changed }

// signal sends a token on c unless one is pending: signals coalesce.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// markDirtyLocked notes that the records differ from the state file.
func (t *Tracker) markDirtyLocked() {
	t.dirty = true
	signal(t.changed)
}

// lastUsedSaveStep is how far an image's last-used time may run ahead of
// the state file's before the records are saved for it. Where containers
// are polled (no event stream), every listing sees each container again
// and moves its image's last-used time to now: saved at once, that is a
// synced write every saveInterval for ever. A crash loses at most this
// much of a last-used time (the shutdown save writes the latest).
const lastUsedSaveStep = time.Minute

// usedLocked stores u, whose LastUsed moved later, as the record of image
// id: dirty when the state file's last-used time for it is
// lastUsedSaveStep or more behind (or it has none), else lagging.
func (t *Tracker) usedLocked(id string, u Usage) {
	t.usage[id] = u
	if u.LastUsed.Sub(t.onDisk[id]) >= lastUsedSaveStep {
		t.markDirtyLocked()
		return
	}
	t.lagging = true
}

// lastUses maps each image of records to its last-used time.
func lastUses(records map[string]Usage) map[string]time.Time {
	m := make(map[string]time.Time, len(records))
	for id, u := range records {
		m[id] = u.LastUsed
	}
	return m
}

// listingStart marks the start of a container listing on the timeline of
// the container events the tracker applied.
type listingStart struct{ seq uint64 }

func (t *Tracker) beginListing() listingStart {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return listingStart{seq: t.seq}
}

// syncContainers lists the runtime's containers with list and brings what
// the tracker knows of containers in line with the listing, which it
// returns. One listing runs at a time, so listings begin, are taken by the
// runtime and are applied in the same order; and they are ordered with the
// container events: a listing never undoes what the tracker learned after
// it began (a container an event reported then stays although the listing
// lacks it; one an event deleted then is not brought back). So once the
// call returns, the tracker knows every container the listing holds, and
// every one an event reported since.
func (t *Tracker) syncContainers(ctx context.Context, list func(context.Context) ([]*runtimeapi.Container, error)) ([]*runtimeapi.Container, error) {
	t.listing.Lock()
	defer t.listing.Unlock()
	start := t.beginListing()
	containers, err := list(ctx)
	if err != nil {
		return nil, err
	}
	t.applyContainers(start, containers)
	return containers, nil
}

func (t *Tracker) applyContainers(start listingStart, containers []*runtimeapi.Container) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setContainersLocked(start, containers)
}

// syncImages lists the runtime's images with list and brings the usage
// records in line with the listing (see applyImages), dated now() as it
// returns; it returns the listing. Uses that container events reported of
// images the tracker did not know yet are applied when the listing holds
// them; those of events after the listing began wait for the next one.
func (t *Tracker) syncImages(ctx context.Context, list func(context.Context) ([]*runtimeapi.Image, error), now func() time.Time) ([]*runtimeapi.Image, error) {
	start := t.beginListing()
	images, err := list(ctx)
	if err != nil {
		return nil, err
	}
	t.reconcileImages(start, images, now())
	return images, nil
}

// applyImages brings the usage records in line with a listing of the
// runtime's images taken at now: images seen for the first time get
// FirstDetected = now, images referenced by a container the tracker knows
// (in any state) get LastUsed = now, and records of images that are gone
// are dropped. A use an event reported before the image was listed counts
// from FirstDetected on (see observeEvent). Sync the containers first.
func (t *Tracker) applyImages(images []*runtimeapi.Image, now time.Time) {
	t.reconcileImages(t.beginListing(), images, now)
}

func (t *Tracker) reconcileImages(start listingStart, images []*runtimeapi.Image, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.followLocked()
	// Image listings run concurrently (the GC run, the usage watcher): one
	// begun before the newest applied is older and is dropped, or it would
	// take an image pulled in between for gone.
	if start.seq < t.imagesApplied {
		return
	}
	t.imagesApplied = start.seq
	refs := t.refs
	t.names, t.lastImages = nil, images
	for _, img := range images {
		id := img.GetId()
		u, known := t.usage[id]
		before := u.LastUsed
		if !known {
			u = Usage{FirstDetected: now}
		}
		if usedBy(img, refs) && u.LastUsed.Before(now) {
			u.LastUsed = now
		}
		if len(t.pending) > 0 {
			if at, ok := t.takePendingLocked(img); ok {
				if used := latest(at, u.FirstDetected); u.LastUsed.Before(used) {
					u.LastUsed = used
				}
			}
		}
		switch {
		case !known:
			t.usage[id] = u
			t.markDirtyLocked()
		case !u.LastUsed.Equal(before):
			t.usedLocked(id, u)
		}
	}
	// What the listing did not resolve names no image, unless the event
	// came after the listing began (the image may have come since).
	for ref, p := range t.pending {
		if p.seq < start.seq {
			delete(t.pending, ref)
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
				t.markDirtyLocked()
			}
		}
	}
}

// takePendingLocked removes the pending uses of img's names and returns
// the latest.
func (t *Tracker) takePendingLocked(img *runtimeapi.Image) (at time.Time, found bool) {
	take := func(name string) {
		if p, ok := t.pending[name]; ok {
			delete(t.pending, name)
			at, found = latest(at, p.at), true
		}
	}
	take(img.GetId())
	for _, n := range img.GetRepoTags() {
		take(n)
	}
	for _, n := range img.GetRepoDigests() {
		take(n)
	}
	return at, found
}

// setContainersLocked replaces the container set with a listing begun at
// start, or drops the listing (false) when one begun later was applied
// (syncContainers never lets that happen; the check keeps the rule local).
//
// A listing with the same entries as the last one (in any order) and no
// event since changes nothing and costs one hash per entry. Otherwise, when
// the map is still exactly the last listing (no event since), only the
// entries that differ between the two listings are looked up: both are kept
// sorted by entry hash and merged. After events, while deletions are
// remembered, when two entries of a listing share a hash, or when the
// listing or the last one gives containers no ID of their own, every entry
// is looked up and the ones not listed dropped, except what events reported
// after start.
func (t *Tracker) setContainersLocked(start listingStart, containers []*runtimeapi.Container) bool {
	if start.seq < t.applied {
		return false
	}
	t.applied = start.seq
	entries, digest := hashListing(t.seeds, containers)
	if !t.eventsSince && digest == t.lastDigest {
		t.tellFaultsLocked(faultInListing, t.lastFaults) // the same again
		return true
	}
	entries = sortByHash(entries)
	newer := false // the map keeps what events after start said
	var faults idFaults
	if t.eventsSince || len(t.tombstones) > 0 || t.lastListing == nil || t.lastFaults.any() || hasDuplicateHash(entries) ||
		!t.applyListingDiffLocked(containers, entries) {
		newer, faults = t.replaceContainersLocked(start, containers)
	}
	for id, seq := range t.tombstones {
		if seq < start.seq {
			delete(t.tombstones, id) // the listing began after the deletion
		}
	}
	ids := make([]string, len(entries))
	for i := range entries {
		ids[i] = containers[entries[i].idx].GetId()
	}
	// When the map is not exactly this listing, the next one is applied
	// entry by entry; so is the one after a listing with faults.
	t.eventsSince = newer
	t.lastListing, t.lastIDs, t.lastDigest, t.lastFaults = entries, ids, digest, faults
	t.tellFaultsLocked(faultInListing, faults)
	return true
}

// replaceContainersLocked looks every listed container up and drops the
// ones not listed, except those an event reported after start; a container
// an event deleted after start is not brought back. It reports whether
// events after start made the map differ from the listing, and the listed
// containers without an ID of their own (none, or one another listed
// container has too), each kept under sharedKey: which of two containers
// of one ID an event deleted cannot be told, so both stay then.
func (t *Tracker) replaceContainersLocked(start listingStart, containers []*runtimeapi.Container) (newer bool, faults idFaults) {
	t.generation++
	var deleted []*runtimeapi.Container // under an ID an event deleted after start
	for _, c := range containers {
		id := c.GetId()
		switch {
		case id == "" || faults.repeated[id]:
			faults.add(id)
			t.setContainerLocked(sharedKey(id, listedRefs(c)), id, listedRefs(c))
			continue
		case t.tombstones[id] > start.seq:
			deleted = append(deleted, c)
			continue
		}
		tc, ok := t.containers[id]
		if ok && tc.generation == t.generation {
			// Listed before under the same ID: both are shared.
			faults.add(id)
			t.shareLocked(id)
			t.setContainerLocked(sharedKey(id, listedRefs(c)), id, listedRefs(c))
			continue
		}
		t.updateContainerLocked(tc, id, id, listedRefs(c))
	}
	if len(deleted) > 0 {
		listed := map[string]int{}
		for _, c := range deleted {
			listed[c.GetId()]++
		}
		for _, c := range deleted {
			if listed[c.GetId()] == 1 {
				newer = true
				continue
			}
			faults.add(c.GetId())
			t.setContainerLocked(sharedKey(c.GetId(), listedRefs(c)), c.GetId(), listedRefs(c))
		}
	}
	for key, tc := range t.containers {
		if tc.generation == t.generation {
			continue
		}
		if tc.seq > start.seq {
			newer = true
			continue
		}
		t.removeContainerLocked(key)
	}
	return newer, faults
}

// shareLocked moves the container under id to its sharedKey: another
// container has its ID.
func (t *Tracker) shareLocked(id string) {
	tc := t.containers[id]
	delete(t.containers, id)
	key := sharedKey(id, tc.refs)
	if same, ok := t.containers[key]; ok { // one already there, of the same image
		t.countLocked(tc.refs, -1)
		same.generation, same.seq = max(same.generation, tc.generation), max(same.seq, tc.seq)
		return
	}
	t.containers[key] = tc
}

// applyListingDiffLocked applies the difference between the last listing
// (which the map holds exactly) and entries, both sorted by hash: entries
// only in the last listing are removed first, then entries only in the new
// one are set (a container whose image references changed is in both). It
// stops, false, at an entry without an ID of its own (none, or one the map
// holds then: another entry has it): the listing is to be applied whole.
func (t *Tracker) applyListingDiffLocked(containers []*runtimeapi.Container, entries []listedEntry) bool {
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
		if _, known := t.containers[c.GetId()]; known || c.GetId() == "" {
			return false
		}
		t.setContainerLocked(c.GetId(), c.GetId(), listedRefs(c))
	}
	return true
}

func listedRefs(c *runtimeapi.Container) imageRefs {
	return imageRefs{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()}
}

// observeEvent applies one CRI container event: the containers it reports
// reference their images from then on, a deleted container stops doing so,
// and the images involved count as used at the event's time. An image the
// tracker does not know yet (pulled since the last image listing) gets the
// use when a listing first holds it, and unknownImages asks for one.
//
// A use is never dated before nodegc first saw the image, and never moves
// a last-used time backwards: the runtime may deliver events it kept while
// nobody subscribed, with their own, older times (containerd does, at
// subscription); a use dated before the image was first detected counts as
// a use then, since nodegc cannot tell it from a use of an earlier copy of
// the image that was removed since.
//
// Events are ordered with listings (syncContainers): a listing begun
// before an event never undoes it. A container reported after its DELETED event
// (the runtime builds an event's statuses before it sends it, so events of
// one sandbox may carry a container that is gone by then) stays deleted.
func (t *Tracker) observeEvent(ev *runtimeapi.ContainerEventResponse) {
	at := time.Unix(0, ev.GetCreatedAt())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.followLocked()
	t.eventsSince = true
	t.seq++
	var faults idFaults
	if ev.GetContainerId() == "" {
		faults.add("")
	}
	deleted := ev.GetContainerEventType() == runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
	if deleted {
		if tc, ok := t.containers[ev.GetContainerId()]; ok {
			t.touchLocked(tc.refs, at)
		}
		t.removeContainerLocked(ev.GetContainerId())
		t.tombstones[ev.GetContainerId()] = t.seq
	}
	statuses := ev.GetContainersStatuses()
	for _, st := range statuses {
		refs, id := statusRefs(st), st.GetId()
		if id == "" || slices.ContainsFunc(statuses, func(o *runtimeapi.ContainerStatus) bool { return o != st && o.GetId() == id }) {
			// No ID of its own: kept, whatever a deletion says, until a
			// listing begun after this event lacks it.
			faults.add(id)
			t.setContainerLocked(sharedKey(id, refs), id, refs).seq = t.seq
		} else if _, gone := t.tombstones[id]; !gone {
			t.setContainerLocked(id, id, refs).seq = t.seq
		}
		t.touchLocked(refs, at)
	}
	t.tellFaultsLocked(faultInEvent, faults)
}

func statusRefs(st *runtimeapi.ContainerStatus) imageRefs {
	return imageRefs{st.GetImageRef(), st.GetImageId(), st.GetImage().GetImage()}
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
	id         string // as the runtime gave it (the key, unless shared)
	refs       imageRefs
	generation uint64
	// seq is the number of the last event that reported the container; 0
	// when only listings did.
	seq uint64
}

// setContainerLocked records that container id, kept under key (id, or
// sharedKey), references refs, keeping the reference counts exact; it
// returns the container's entry.
func (t *Tracker) setContainerLocked(key, id string, refs imageRefs) *trackedContainer {
	return t.updateContainerLocked(t.containers[key], key, id, refs)
}

// updateContainerLocked is setContainerLocked where tc is the entry under
// key (nil for none).
func (t *Tracker) updateContainerLocked(tc *trackedContainer, key, id string, refs imageRefs) *trackedContainer {
	if tc == nil {
		tc = &trackedContainer{id: id}
		t.containers[key] = tc
	} else if tc.refs == refs {
		tc.generation = t.generation
		return tc
	}
	t.countLocked(tc.refs, -1)
	tc.refs, tc.generation = refs, t.generation
	t.countLocked(refs, +1)
	if !t.knownLocked(refs) {
		// A listing or an event names an image pulled since the last image
		// listing: list the images, so that it is known (and used) while
		// the container is.
		signal(t.unknown)
	}
	return tc
}

// knownLocked reports whether a known image has one of the references.
func (t *Tracker) knownLocked(refs imageRefs) bool {
	for _, r := range refs {
		if _, ok := t.resolveLocked(r); ok {
			return true
		}
	}
	return false
}

func (t *Tracker) removeContainerLocked(key string) {
	if tc, ok := t.containers[key]; ok {
		delete(t.containers, key)
		t.countLocked(tc.refs, -1)
	}
}

// sharedKey is the key of a container the runtime gave no ID of its own
// (none, or one another container of the same listing or event has too):
// a NUL, which no container ID starts with, its ID and its image
// references. Two such containers of one ID and image are one entry: they
// keep the same image.
func sharedKey(id string, refs imageRefs) string {
	return "\x00" + id + "\x00" + refs[0] + "\x00" + refs[1] + "\x00" + refs[2]
}

// Where the runtime gave containers no ID of their own (fault source).
const (
	faultInListing = "listing"
	faultInEvent   = "event"
)

// idFaults are the containers a listing or an event gave no ID of their
// own: how many without an ID, and the IDs given to more than one.
type idFaults struct {
	empty    int
	repeated map[string]bool
}

func (f *idFaults) add(id string) {
	if id == "" {
		f.empty++
		return
	}
	if f.repeated == nil {
		f.repeated = map[string]bool{}
	}
	f.repeated[id] = true
}

func (f idFaults) any() bool { return f.empty > 0 || len(f.repeated) > 0 }

// String says what f counts, naming at most 5 IDs.
func (f idFaults) String() string {
	var parts []string
	if f.empty > 0 {
		parts = append(parts, fmt.Sprintf("%d without an ID", f.empty))
	}
	if len(f.repeated) > 0 {
		ids := slices.Sorted(maps.Keys(f.repeated))
		more := ""
		if len(ids) > 5 {
			ids, more = ids[:5], fmt.Sprintf(" and %d more", len(ids)-5)
		}
		parts = append(parts, fmt.Sprintf("IDs given to more than one: %q%s", ids, more))
	}
	return strings.Join(parts, "; ")
}

// tellFaultsLocked tells onFaults of faults, if any.
func (t *Tracker) tellFaultsLocked(source string, f idFaults) {
	if f.any() && t.onFaults != nil {
		t.onFaults(source, f)
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

// touchLocked records a use at `at` of the image the references name: its
// LastUsed becomes at (or its FirstDetected, if later) unless already
// later. When no known image has any of the references, the use waits for
// the next image listing (pending).
func (t *Tracker) touchLocked(refs imageRefs, at time.Time) {
	resolved := false
	for _, r := range refs {
		id, ok := t.resolveLocked(r)
		if !ok {
			continue
		}
		resolved = true
		u := t.usage[id]
		if used := latest(at, u.FirstDetected); u.LastUsed.Before(used) {
			u.LastUsed = used
			t.usedLocked(id, u)
		}
	}
	if resolved {
		return
	}
	for _, r := range refs {
		if r == "" {
			continue
		}
		p := t.pending[r]
		p.at, p.seq = latest(p.at, at), t.seq
		t.pending[r] = p
		signal(t.unknown)
	}
}

// latest returns the later of two times, earliest the earlier.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// observeArrivals bounds first-detected times by when the runtime says the
// images arrived (image ID -> time): an image cannot have been seen before
// it arrived, so a record that says otherwise is of an earlier copy of the
// same image, removed and pulled again while nodegc was not watching. Its
// first-detected time moves to the arrival, and a last-used time from
// before the arrival is dropped.
//
// Once per arrival: each record keeps the arrival it was last checked
// against (Usage.Arrived, in the state file too), and only another one is
// checked. The runtime keeps the time it wrote, on the wall clock of the
// pull, which a step since has not moved as it moved the records (while
// nodegc ran, or while it was down: stepWhileDown): after a step back the
// same arrival is later than the moved first-detected time, and would
// undo the move. A record without an arrival (none read yet, or from an
// older nodegc's file) is checked against the first one read, as above:
// after a step back, an arrival later than the moved first-detected time
// may be the same copy's, on the clock of before the step, or a copy
// pulled since, on the clock of after it. It is taken for a new copy: the
// same copy is then kept longer (min_age) and ranks as unused, where the
// other reading could remove a copy just pulled before the minimum age.
//
// After a step forward, an arrival read counts from the arrival plus the
// steps forward that moved the record since the runtime was last asked
// for it (Usage.SteppedForward, counted from from of that read), or from
// now if that is earlier; not from the arrival alone. A copy pulled since
// that read was pulled after those steps began to count, and they moved
// its pull on the records' timeline by at most as much (only those after
// the pull), so it counts no older than it is; a step back only makes it
// younger. From the arrival alone, a copy pulled again by another client
// between two listings (or while nodegc was down), then a step forward of
// more than the minimum age, counts older by the step and goes before the
// minimum age: at the plan, or at the run after a check before a removal
// kept it. Counting from now after any step forward would be as safe, but
// would keep a copy longer than the minimum age where the step came before
// the pull.
//
// A record with an arrival of its own that gets another is a new copy,
// whatever the times say. Its arrival, so corrected, not after the
// record's first-detected time happens only where a step forward went
// uncounted (in a state file of a nodegc that did not count them): where
// the copy falls on the records' timeline is not known, so it counts from
// now, unused; dated as the old copy, it could go before the minimum age.
//
// from is the tracker's reading (follow) taken before the runtime was
// asked: a copy pulled after it answered for an image is pulled after
// from, and the steps forward since from count for it at the next read.
func (t *Tracker) observeArrivals(arrivals map[string]time.Time, from recordsNow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.followLocked()
	for id, at := range arrivals {
		u, ok := t.usage[id]
		if !ok {
			continue
		}
		stepped := u.SteppedForward
		if checked := now.forward - from.forward; checked != stepped {
			u.SteppedForward = checked
			t.usage[id] = u
			t.markDirtyLocked()
		}
		if u.Arrived.Equal(at) {
			continue
		}
		since := earliest(at.Add(stepped), now.at)
		if !u.Arrived.IsZero() && !since.After(u.FirstDetected) {
			since = now.at
		}
		u.Arrived = at
		if since.After(u.FirstDetected) {
			u.FirstDetected = since
			if u.LastUsed.Before(since) {
				u.LastUsed = time.Time{}
			}
		}
		t.usage[id] = u
		t.markDirtyLocked()
	}
}

// age is how long ago, on the records' timeline now, the tracker first
// detected the image id; false when it has no record of it.
func (t *Tracker) age(id string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.followLocked()
	u, ok := t.usage[id]
	if !ok {
		return 0, false
	}
	return now.at.Sub(u.FirstDetected), true
}

// planInput joins a listing of the runtime's images with what the tracker
// knows into the planner's input, and returns the reading of the clock the
// plan reads ages off (recordsNow): the records copied and now are on one
// timeline, whichever step of the wall clock the tracker applied before
// (while the plan read the node: a step back of D applied then, with a now
// read before it, would age every record by D). Images the tracker has not
// seen yet count as first detected now (so the minimum age protects them).
func (t *Tracker) planInput(images []*runtimeapi.Image) ([]Image, recordsNow) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.followLocked()
	refs := t.refs
	out := make([]Image, 0, len(images))
	for _, img := range images {
		u, ok := t.usage[img.GetId()]
		if !ok {
			u = Usage{FirstDetected: now.at}
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
			WatchedSince:  t.watchedSince,
			RanSandboxes:  u.Sandbox,
		})
	}
	return out, now
}

// recordsNow is a reading of the wall clock on the records' timeline: taken
// under the tracker's lock right after the steps found up to it were
// applied to the records (followLocked). An age read off it for a record
// copied under the same lock is what the monotonic clock says, whatever
// step comes after: that step moves neither the reading nor the copy.
type recordsNow struct {
	at time.Time
	// forward is the sum of the steps forward the tracker applied up to
	// the reading: one between two readings is their difference. A time
	// the tracker did not date (the runtime's arrival of an image) that
	// falls between them is later on the second's timeline by at most
	// that much.
	forward time.Duration
}

// follow reads the wall and the monotonic clock and applies a step of the
// wall clock since the last reading (followLocked); it returns the reading.
func (t *Tracker) follow() recordsNow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.followLocked()
}

// followLocked applies a step of the wall clock since the last reading to
// the records (shiftLocked) and tells onStep; it returns the reading, on
// the records' timeline. It is called right before each time the tracker
// dates a record, so every record is on the wall clock's timeline of its
// reading: none dated after a step is moved by it.
func (t *Tracker) followLocked() recordsNow {
	now := t.clock()
	step := t.steps.Follow(now).By
	if step != 0 {
		t.shiftLocked(step)
		if step > 0 {
			t.forward += step
		}
		if t.onStep != nil {
			t.onStep(step)
		}
	}
	return recordsNow{at: now, forward: t.forward}
}

// shiftLocked moves every time the records keep by d: the wall clock was
// stepped by d (clockstep.Follower), and their ages stay what they were. A
// moved time keeps no monotonic reading: a time this process dated carries
// one, by which its age would be read (unmoved by the step), and which
// must not move. Usage.Arrived is the runtime's time, which the step did
// not move either: it stays, and a step forward counts in
// Usage.SteppedForward.
func (t *Tracker) shiftLocked(d time.Duration) {
	move := func(at time.Time) time.Time { return shifted(at, d) }
	for id, u := range t.usage {
		u.FirstDetected, u.LastUsed = move(u.FirstDetected), move(u.LastUsed)
		if d > 0 {
			u.SteppedForward += d
		}
		t.usage[id] = u
	}
	for ref, p := range t.pending {
		p.at = move(p.at)
		t.pending[ref] = p
	}
	t.watchedSince = move(t.watchedSince)
	t.markDirtyLocked()
}

// shifted is at moved by d, the step of the wall clock since at was read,
// without a monotonic reading (see shiftLocked); a zero time stays zero.
func shifted(at time.Time, d time.Duration) time.Time {
	if at.IsZero() {
		return at
	}
	return at.Round(0).Add(d)
}

// rememberSandboxes records ran, the IDs of the images the sandboxes run
// now, as the sandbox images (Usage.Sandbox), in place of those remembered
// before; an empty ran changes nothing: the images the sandboxes last ran
// stay remembered.
func (t *Tracker) rememberSandboxes(ran map[string]bool) {
	if len(ran) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, u := range t.usage {
		if u.Sandbox != ran[id] {
			u.Sandbox = ran[id]
			t.usage[id] = u
			t.markDirtyLocked()
		}
	}
}

// usedAt records a use at at of the known images ids (mounted as image
// volumes: no container event or listing names them), never moving a
// last-used time backwards.
func (t *Tracker) usedAt(ids []string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.followLocked()
	for _, id := range ids {
		u, ok := t.usage[id]
		if !ok {
			continue
		}
		if used := latest(at, u.FirstDetected); u.LastUsed.Before(used) {
			u.LastUsed = used
			t.usedLocked(id, u)
		}
	}
}

// watchStart returns when nodegc began its current watch of the node's
// containers (Image.WatchedSince).
func (t *Tracker) watchStart() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watchedSince
}

// containerIDs returns the IDs of the containers the tracker knows, or
// errSharedContainerIDs when it knows containers the runtime gave no ID of
// their own: their statuses cannot be asked for.
func (t *Tracker) containerIDs() ([]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.containers))
	var shared idFaults
	for key, tc := range t.containers {
		if key != tc.id {
			shared.add(tc.id)
			continue
		}
		ids = append(ids, key)
	}
	if shared.any() {
		return nil, fmt.Errorf("%w: %s", errSharedContainerIDs, shared)
	}
	return ids, nil
}

// errSharedContainerIDs says the runtime gives containers no ID of their
// own (none, or one another container has too): what they mount cannot be
// asked.
var errSharedContainerIDs = errors.New("the runtime gives containers no ID of their own, so which images they mount as image volumes cannot be read")

// inUse reports whether a container the tracker knows references the image
// (by ID, tag or digest).
// touchUsed dates at now a use of each image of the last image listing
// that a container uses now, as an image listing would (reconcileImages):
// the polls between two image listings date the uses this way.
func (t *Tracker) touchUsed(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.followLocked()
	for _, img := range t.lastImages {
		u, known := t.usage[img.GetId()]
		if known && usedBy(img, t.refs) && u.LastUsed.Before(now) {
			u.LastUsed = now
			t.usedLocked(img.GetId(), u)
		}
	}
}

// usedIDs returns the IDs of the images of the last image listing that a
// container uses now, under any of their names.
func (t *Tracker) usedIDs() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := map[string]bool{}
	for _, img := range t.lastImages {
		if usedBy(img, t.refs) {
			ids[img.GetId()] = true
		}
	}
	return ids
}

// releasedSince reports whether an image of used (usedIDs' answer then)
// is still listed and no container uses it now: it lost its last
// container, and may have become removable. Containers that came and went
// meanwhile, or gave other names of an image that stays in use, are no
// release.
func (t *Tracker) releasedSince(used map[string]bool) bool {
	if len(used) == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, img := range t.lastImages {
		if used[img.GetId()] && !usedBy(img, t.refs) {
			return true
		}
	}
	return false
}

func (t *Tracker) inUse(img *Image) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return anyNameIn(t.refs, img.ID, img.RepoTags, img.RepoDigests)
}

// forget drops the record of an image nodegc removed, so that the same
// image pulled again counts as first detected then, not when it was first
// seen before its removal.
func (t *Tracker) forget(imageID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.usage[imageID]; ok {
		delete(t.usage, imageID)
		t.markDirtyLocked()
	}
}

// Usage returns a copy of the usage records.
func (t *Tracker) Usage() map[string]Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.usage)
}

// save writes the usage records to the state directory if they changed
// (never for a read-only tracker), and says whether it wrote the file. Last-
// used times less than lastUsedSaveStep past the file's are written with
// other changes only; saveAll (at shutdown) writes them too.
func (t *Tracker) save() (bool, error) { return t.write(false, false) }

// saveAll is save, also when the records differ from the file only by
// recent last-used times.
func (t *Tracker) saveAll() (bool, error) { return t.write(true, false) }

// saveFinal is saveAll, also when nothing changed: at shutdown, it dates
// the end of the watch, so that the next start, soon after, goes on with
// it (watch.continuousSince).
func (t *Tracker) saveFinal() (bool, error) { return t.write(true, true) }

func (t *Tracker) write(all, always bool) (bool, error) {
	// One write at a time, so that a write never replaces a newer one.
	t.saving.Lock()
	defer t.saving.Unlock()
	t.mu.Lock()
	// A step of the wall clock since the last reading moves the records
	// before they are written beside the clocks' readings of now: unmoved,
	// the next start would find no step between the file and itself.
	t.followLocked()
	if t.readOnly || !(t.dirty || all && t.lagging || always) {
		t.mu.Unlock()
		return false, nil
	}
	snapshot := maps.Clone(t.usage)
	dirty, lagging := t.dirty, t.lagging
	t.dirty, t.lagging = false, false
	since := t.watchedSince
	t.mu.Unlock()
	var boot bootReading
	if t.boot != nil {
		boot = t.boot()
	}
	if err := saveState(t.dir, t.node, snapshot, since, t.clock(), boot); err != nil {
		t.mu.Lock()
		t.dirty, t.lagging = t.dirty || dirty, t.lagging || lagging
		t.mu.Unlock()
		return false, err
	}
	t.mu.Lock()
	t.onDisk = lastUses(snapshot)
	t.mu.Unlock()
	return true, nil
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
