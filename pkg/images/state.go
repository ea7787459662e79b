package images

import (
	"math"
	"math/bits"
	"time"
	"unique"
)

// Layer is a piece of storage an image holds, shared by every image that
// lists the same Key (a content digest or a snapshot chain ID). Keys are
// interned (unique.Make) where layers are read, so that planning compares
// and hashes handles, not long digests.
type Layer struct {
	Key  unique.Handle[string]
	Size uint64
}

// Image is what the planner knows of one image.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	// Size is the CRI size: shared layers counted in every image.
	Size   uint64
	Pinned bool
	// Sandbox marks the runtime's sandbox (pause) image.
	Sandbox bool
	// RanSandboxes: the runtime's sandboxes ran this image when last seen
	// running (Usage.Sandbox); markSandbox reads it.
	RanSandboxes bool
	// InUse: a container the runtime knows, in any state, uses the image.
	InUse bool
	// Unreadable: the runtime cannot read what the image holds (its top
	// layer: ErrImageUnreadable) while it has records of containers made
	// on some image's top layer, so whether one was made on this one
	// cannot be told: it may be in use (markRecorded).
	Unreadable bool
	// Scheduled: a pod bound to this node that has not finished may still
	// run the image (or the pod view cannot say it will not); ScheduledBy
	// says which pod, or why.
	Scheduled   bool
	ScheduledBy string
	// FirstDetected is when nodegc first saw the image.
	FirstDetected time.Time
	// LastUsed is when a container last used the image; zero if never
	// since nodegc knows it.
	LastUsed time.Time
	// WatchedSince is when nodegc began to watch the node's containers
	// without a break: a use before it may have gone unseen, so the age
	// rule counts unused time from it at the earliest. Zero: from LastUsed.
	WatchedSince time.Time
	// Arrived is when the runtime says the image arrived (containerd: its
	// image record's creation); zero if unknown. It orders images that
	// are equal by last-used and first-detected times (pulled between two
	// of nodegc's listings).
	Arrived time.Time
	// Layers, when known, give exact accounting: removing an image frees
	// the layers no remaining image holds. Nil means: use Size.
	Layers []Layer
}

// DiskStats is the capacity and free space of the image filesystem.
type DiskStats struct {
	Capacity  uint64
	Available uint64
}

// UsagePercent is 100 - available*100/capacity, rounded down in the
// available part as kubelet does (without its overflow past 2^64 bytes:
// about 184 PB available).
func (d DiskStats) UsagePercent() int {
	if d.Capacity == 0 {
		return 0
	}
	avail := min(d.Available, d.Capacity)
	return 100 - int(mulDiv(avail, 100, d.Capacity))
}

// mulDiv is a*b/c rounded down, on 128 bits: a*b does not overflow; a
// quotient past 2^64 - 1 is that. c must not be 0.
func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}
