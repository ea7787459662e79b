// Package images is nodegc's image garbage collector: kubelet's image GC
// (LRU, driven by disk thresholds and ages) with durable usage records,
// exact shared-layer accounting on containerd and measured freed bytes.
//
// Decide, then act, in the flow config -> policy -> plan -> execute, file
// by file:
//   - pkg/config: the imageGC section, defaulted and validated
//     (config.ValidateImageGC); NewManager refuses an invalid one.
//   - policy.go: NewPolicy makes a Policy of it and checks nothing again.
//   - state.go: what the policy reads: Image (joined from the runtime's
//     listing and the Tracker's records), Layer and DiskStats.
//   - tracker.go, statefile.go: the Tracker keeps first-detected and
//     last-used times from container listings (every diskCheckInterval)
//     and, with Config.ContainerEvents, events, and which images
//     containers use; statefile.go writes them to the state directory,
//     within saveInterval of a change, except a last-used time that moved
//     less than lastUsedSaveStep (every listing moves those of the images
//     in use, where containers are polled): it waits for the next write, or
//     the save at shutdown.
//     accounting.go counts layers shared between images once; containerd.go
//     reads layers, arrival times and the records of containers from
//     containerd, and what else holds
//     image storage there (ContainerdLayers.Held: other namespaces' images,
//     leases, active snapshots), which removals cannot free; what an image
//     is made of is cached, and what of it the node holds (its snapshots
//     and blobs, which unpacks, pulls and discards change) is checked each
//     plan against listings read with Held. Content blobs
//     count only where the content store shares the image filesystem (a
//     disk mounted for the snapshots alone leaves them on another one; one
//     filesystem is one device in the mount table, or one ZFS pool).
//   - plan.go: Policy.Plan, a pure function of (images, disk, now) that
//     returns a Plan: images unused longer than maximumGCAge (age; unused
//     time counts from Image.WatchedSince at the earliest), then,
//     over the high threshold, LRU images down to the low one (space); every
//     other image kept with its reason (protected: in use, pinned, sandbox,
//     scheduled, excluded, min age, newest tags). Policy.PlanAhead plans for
//     the disk as it will be once more bytes arrive (the projected trigger). A new rule is a case there, its
//     Reason* or Keep* constant and its value in the lists of metrics.go.
//   - executor.go: execute removes a plan's images in order through CRI,
//     checking each is still unused, and plans again (Policy.replan) when
//     one is skipped or fails.
//   - scheduled.go: marks the images that pods bound to the node and not
//     finished may still run (PodImageSource, the agent's pod informer).
//   - clockstep.go: steps of the wall clock against the monotonic one,
//     found at each disk check and right before the tracker dates a
//     record; each moves the usage records (Tracker.shiftLocked) so that
//     images keep their ages, and a step back moves when the pod view was
//     last authoritative with them.
//   - guardian.go: the fill rate of the last readings of the image
//     filesystem, the projection against the kubelet's eviction threshold
//     (the stricter of evictionHard and evictionSoft) over fillRateHorizon,
//     the warning when the high threshold lets the kubelet evict first, and
//     the reaction times.
//   - manager.go: Manager lists the runtime, plans and executes, on a disk
//     check every diskCheckInterval and right after each write the runtime
//     reports to its storage (Options.Writes: containerd's events of blobs,
//     layers and images; at most one per writeCheckSpacing), with trigger
//     threshold or projected. Once usage reached the high threshold, the
//     checks collect down to the low one, between the thresholds too (pulls
//     beside a run can leave usage there), until usage is down to low or a
//     run there removes nothing. A run that removed nothing and leaves the
//     disk calling for another is followed by the next after 1, 2, 4, ...
//     checks, up to period, until usage is under the low threshold
//     (thresholdBackoff). A sweep runs every period; one run at a time on
//     internal/gcrun's lifecycle. It reports each run (Report); metrics.go
//     records it. Manager.Plan plans without executing (`nodegc plan`).
//
// Safety invariants, each with a test against a real containerd:
//   - Never an image in use by any container, in any state: the plan keeps
//     images in use, and right before each removal the executor lists the
//     runtime's containers again (events live or not: the runtime may drop
//     events, and a CREATED event may still be on its way), so a container
//     that exists when that check begins is never missed; it ends with
//     another listing, events live or not (a stream may stay open and send
//     nothing), and what the events told meanwhile. On containerd,
//     its own records of containers in the CRI plugin's namespace are read
//     too (Options.ContainerRecords), at the plan and at the end of that
//     check, after its last listing of the containers (both made again
//     while together they took more than lateReadBound): CRI
//     does not list those made through containerd's API (ctr, nerdctl,
//     buildkit) nor one the CRI plugin failed to load; a record keeps the
//     image it names, the one whose top layer its root filesystem was
//     made on (a tag it names may have moved), and, one of the CRI
//     plugin's, the one its metadata says it was made from. A record on a
//     snapshotter containerd does not serve (a proxy snapshotter down) has
//     no root filesystem to read: it keeps the images it names and its
//     metadata gives only (ContainerdLayers.ContainerRecords). An image whose storage
//     containerd cannot read while it answers (ErrImageUnreadable: a blob
//     gone from its content store) cannot be told unused by a record's
//     top layer: while records exist, the plan and the check keep it
//     (KeepUnreadable, logged once while it stays so) and go on with the
//     others; containerd not answering still fails them. The same check
//     reads the sandboxes and the pod view again, after its slow calls
//     (the pod view last: a pod bound since the plan, or during the
//     check, keeps its images as scheduled), and asks the runtime for the
//     image (ImageLookup): one another removed since the plan is reported
//     gone, not removed (the runtime answers its removal with success), and
//     one that gained names since (a pull of another name of it) is judged
//     by all of them, as RemoveImage removes every one: pinned, excluded,
//     sandbox and scheduled are decided again on them. When the runtime
//     does not answer, the run stops there with the runtime's error: it
//     neither removes on doubt nor asks a dead runtime again for every
//     candidate.
//   - The Tracker never forgets a container it was told of while it
//     exists. Container listings run one at a time (syncContainers), and
//     listings and events are ordered on one timeline: a listing begun
//     before an event never undoes it (a container created meanwhile stays,
//     one deleted meanwhile is not brought back). Nor does it merge two: a
//     container a listing or an event gives no ID of its own (none, or one
//     another container there has too: the runtime misbehaves) is kept
//     under its references (sharedKey), whatever a deletion of its ID says,
//     until a listing without it; such listings and events are counted and
//     logged (Tracker.onFaults).
//   - Never an image a container the tracker knows, in any state, mounts
//     as an image volume (volumes.go: each container's status is read once,
//     as CRI lists containers without their mounts; a status that cannot
//     be read, or a container without an ID of its own, whose status cannot
//     be asked for, fails the plan or the check before a removal).
//   - Never an image a pod bound to this node that has not finished names
//     (by reference, normalised, or by the image ID its status gives), in
//     a container or an image volume (before any container mounts it). When
//     the pod view is not authoritative, more is kept, never less: the last
//     known pods' images, and every image that arrived since the view last
//     was (all, if it never was since start). When it last was moves with
//     each step of the wall clock back the tracker applies to its records,
//     and stays with a step forward, so that a step never keeps less
//     (PodsMemory.steppedBack).
//   - Never a sandbox image: the runtime's, as its config writes it, in
//     any form (normalised as pod references are), and the image of any
//     pod sandbox containerd holds (Options.Sandboxes), listed again right
//     before each removal; while it holds none, the image its sandboxes
//     last ran (Usage.Sandbox, kept in the state file). containerd 2.x
//     does not report its sandbox image, and pins it only when it was
//     pulled under exactly the name configured, so the sandboxes are what
//     tells. The configured one is what the runtime said when the manager
//     was built: after a loss of the connection (a restart may have changed
//     it), no image is removed until ConfirmProfile says it still holds on
//     the new connection (Options.ProfileGeneration), nor at all while it
//     could not be read (Options.ProfileUnread).
//   - Never a pinned image, an excluded image, or one
//     first detected less than minimumGCAge ago. First-detected times are
//     bounded by when the runtime says the image arrived (containerd's
//     image record), once per arrival (each record keeps the arrival it was
//     checked against, unmoved by steps of the clock: Usage.Arrived, in the
//     state file): an image removed and pulled again while nodegc was down
//     is young again, whatever the state file says (from its arrival plus
//     the steps of the clock forward since its record was last checked
//     against one, which moved the record and not the arrival:
//     Usage.SteppedForward), and so is one removed and pulled again between
//     two listings, or between the plan and its removal (the check before
//     each removal reads when it arrived, and dates it the same way:
//     arrivedYoung); a plan reads now
//     with the records it copies, after the steps applied to them, so that
//     a step while it reads the node ages none (Tracker.planInput,
//     recordsNow); a state record without
//     a first-detected time, or with times after the clock's (saved while
//     the clock ran ahead), counts from the load. Where the runtime does
//     not say when an image arrived (another runtime, containerd's API not
//     answering, or its read failed), the minimum age counts from the start
//     of the current watch at the earliest (youngSince), as the kubelet
//     counts from its own start.
//   - Bytes reported freed are those of removals that happened: each
//     removal's estimate assumes the ones planned before it, so when one is
//     skipped (in use at the last check) or fails, the run plans again
//     without it (Policy.replan) and goes on; FreeDiskSpaceError whenever the
//     removals that happened fall short of what the threshold asked and
//     none failed (with failures, their errors: an error run, as the
//     kubelet's "errors in image deletion"; in dry run, no error).
//   - The state file names the node it describes (Options.NodeName): one
//     of another node (a disk cloned from a template node) is set aside as
//     a corrupt one is, so that the template's times never date this
//     node's images.
//   - maximumGCAge never removes an image for unused time nodegc did not
//     watch: the state file dates its watch (WatchedSince, WatchedUntil;
//     each write and the final one at shutdown), a start within
//     watchGapCovered of the last write goes on with it, any other begins
//     a new one (continuousSince), and the age rule counts unused time
//     from the watch's start at the earliest, as the kubelet counts from
//     its own.
//   - A plan-only manager (`nodegc plan`) writes nothing: the state is read,
//     a corrupt state file, or one of another node, left where it is.
//
// Last-used times, and what a crash loses:
//   - Every use a listing or an event sees is recorded. Containers are
//     listed every diskCheckInterval, and a listing dates the uses of the
//     images of the containers it lists (one that lives less than that may
//     go unseen). With Config.ContainerEvents, a container event dates a
//     use to the event. A listing or an event
//     that names an image the Tracker has not listed yet (pulled since)
//     is kept until an image listing holds the image, and unknownImages
//     makes the Manager list the images at once.
//   - A use is never dated before the image's first-detected time, and
//     never moves a last-used time backwards: containerd replays, with their
//     own times, the events made while nobody subscribed, and a use before
//     nodegc saw the image cannot be told from a use of an earlier copy.
//   - The records are written (atomically) within saveInterval (2 s) of a
//     change, at once after a quiet interval: kill -9 loses at most that;
//     except a last-used time that moved less than lastUsedSaveStep (1m),
//     written with the next other change, once it is that far, or at
//     shutdown (Tracker.saveAll).
//   - Ties in the LRU order go by first-detected time, then by when the
//     runtime says the image arrived (Image.Arrived), then by ID.
//
// Concurrency: the Tracker is guarded by one mutex, held for short calls
// only and never across a runtime call. containerd 2.x blocks the
// publishers of container events (CreateContainer, StartContainer,
// StopContainer, RemoveContainer) while a subscriber of its CRI event
// stream does not read, so a subscribed nodegc that is stopped or frozen
// stalls the node's containers: the Manager subscribes only with
// Config.ContainerEvents (off by default), and then the stream's reader
// only applies events, so nodegc reads as fast as the runtime sends while
// it runs. The Manager runs one
// GC at a time (gcrun.Serial); Manager.Plan takes no run lock and may run
// beside one.
package images
