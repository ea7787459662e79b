// Package images is nodegc's image garbage collector: usage tracking
// (first-detected and last-used times, kept durably in the state
// directory), disk statistics of the image filesystem, the eviction policy
// as a pure function that returns a plan (what to remove and what to keep,
// and why), layer-aware byte accounting for containerd, and the executor
// that applies a plan through CRI.
//
// Decide, then act. Manager.GarbageCollect lists the runtime (containers,
// then images), brings the Tracker up to date, joins both into []Image and
// hands them with the disk statistics to Policy.Plan, a pure function of
// (images, disk, now). execute applies the plan.
//
// Safety invariants, each with a test against a real containerd:
//   - Never an image in use by any container, in any state: the plan keeps
//     images in use, and right before each removal the executor lists the
//     runtime's containers again (events live or not: the runtime may drop
//     events, and a CREATED event may still be on its way), so a container
//     that exists when that check begins is never missed.
//   - The Tracker never forgets a container it was told of while it
//     exists. Container listings run one at a time (syncContainers), and
//     listings and events are ordered on one timeline: a listing begun
//     before an event never undoes it (a container created meanwhile stays,
//     one deleted meanwhile is not brought back).
//   - Never a pinned image, the sandbox image, an excluded image, or one
//     first detected less than minimumGCAge ago. First-detected times are
//     bounded by when the runtime says the image arrived (containerd's
//     image record): an image removed and pulled again while nodegc was down
//     is young again, whatever the state file says; a state record without
//     a first-detected time counts from the load.
//   - Bytes reported freed are those of removals that happened: each
//     removal's estimate assumes the ones planned before it, so when one is
//     skipped (in use at the last check) or fails, the run plans again
//     without it (Policy.replan) and goes on; FreeDiskSpaceError whenever the
//     removals that happened fall short of what the threshold asked.
//   - A plan-only manager (`nodegc plan`) writes nothing: the state is read,
//     a corrupt state file left where it is.
//
// Last-used times, and what a crash loses:
//   - Every use is recorded. A container event dates a use to the event;
//     one that names an image the Tracker has not listed yet (pulled since)
//     is kept until an image listing holds the image, and unknownImages
//     makes the Manager list the images at once.
//   - A use is never dated before the image's first-detected time, and
//     never moves a last-used time backwards: containerd replays, with their
//     own times, the events made while nobody subscribed, and a use before
//     nodegc saw the image cannot be told from a use of an earlier copy.
//   - The records are written (atomically) within saveInterval (2 s) of a
//     change, at once after a quiet interval: kill -9 loses at most that.
//   - Ties in the LRU order go by first-detected time, then by when the
//     runtime says the image arrived (Image.Arrived), then by ID.
//
// Concurrency: the Tracker is guarded by one mutex, held for short calls
// only and never across a runtime call; the event stream's reader only
// applies events, so nodegc reads as fast as the runtime sends (containerd
// blocks the publishers of container events, CreateContainer and
// StartContainer, while a subscriber does not read). The Manager runs one
// GC at a time.
package images
