// Package ownergc is the cluster-wide ownerReference garbage collector that
// the elected nodegc instance runs: kube-controller-manager's garbage
// collector rebuilt around a graph it trusts, so that a cascade costs about
// one API request per collected object instead of two.
//
// # Parts
//
//   - Discovery (discovery.go) reads every group and resource once per
//     discoveryResyncPeriod, keeps a REST mapper of that snapshot, and hands
//     the resources that support list, watch and delete (preferred version,
//     minus gcIgnoredResources) to the monitor set. Groups that fail
//     discovery keep their monitors, and in the REST mapper the resources
//     they served when this process last read them (so that writes to the
//     objects those monitors deliver find their resource), and a kept
//     monitor is not joined by one of another version of its resource that
//     discovery still serves: a resource has one monitor, at one version
//     (the relist or removal of either of two would act on the other's
//     objects, which the graph tells apart by group and resource only:
//     each observed node records the resource that delivered it last, and
//     a relist or removal acts on that resource's nodes, never on another
//     resource's of the same kind).
//   - Monitors (monitors.go) list and watch one resource each, metadata
//     only, with a client-go reflector whose queue is a feed (feed.go):
//     each change becomes an event, in order, in one unbounded FIFO, and
//     the object is forgotten. No informer cache: the graph is the only
//     copy of the objects (see "# Memory"). Their client decodes only the
//     fields the collector reads (codec.go; see "# Start-up").
//   - The graph builder (builder.go) applies the FIFO to the graph
//     (graph.go): uid → node with identity, owner links, dependents and the
//     flags observed / deleted / virtual, beingDeleted, deletingDependents.
//     It only enqueues work; it never does I/O.
//   - Workers (worker.go, orphan.go): concurrentGCSyncs attempt-to-delete
//     and as many attempt-to-orphan workers on rate-limited queues keyed by
//     UID. They copy what they need from the graph (view.go), decide with
//     pure functions (decide.go) and write (api.go, patch.go). An item
//     that failed (a lookup or a write) is retried with its own backoff,
//     5ms doubling up to maxRetryDelay, and a queue's retries together
//     take at most retryQPS (10) a second, after a burst of 100, as
//     kube-controller-manager's queues do; what events queue is added at
//     once, so the rate of a cascade is not bound by it.
//   - The debug handler (debug.go) serves the graph as DOT or JSON.
//
// In the flow every nodegc collector follows (config → policy → plan →
// execute): New takes the validated ownerGC section; decide.go is the pure
// plan for one object (which owners are gone, which one action); api.go and
// patch.go execute it with preconditions; record.go and metrics.go report.
//
// # Single writer
//
// The graph is written by exactly one goroutine, the builder's
// (run.processGraphChanges), holding graph.mu for writing while it applies a
// batch of events. Workers, metrics and the debug handler only read it,
// holding graph.mu for reading, and copy what they need: no node is read
// outside the lock and no field has its own lock. Workers never write the
// graph: what they learn (an owner a lookup found absent) goes back through
// the FIFO as an event.
//
// # Leader election
//
// One collector writes in the cluster: the one of the instance that holds
// the Lease (internal/agent), and only while no other instance can hold
// it. Options.WriteWindow is asked immediately before every write request
// of every client the collector builds (fence.go, a transport wrapper); a
// refused request fails with ErrLeaseLost without being sent. The agent
// answers it from the lease's own requests, not from client-go's
// callbacks. Let S be when the last successful renewal of the lease was
// sent:
//
//   - the collector may send writes until S + renewDeadline (less a
//     second, minWriteWindow: a write with less would time out), each with a
//     server-side timeout (?timeout=) that ends then: kube-apiserver gives
//     up a write that has not run by then (waiting in a Priority and
//     Fairness queue, or on a webhook) instead of running it later, from
//     when it received the request; one already at etcd may still
//     complete;
//   - another instance counts leaseDuration from when it saw that renewal,
//     after S, so it leads at S + leaseDuration at the earliest
//     (leaseDuration in whole seconds: the Lease records seconds);
//   - so writes are sent no later than leaseDuration - renewDeadline
//     before another instance can lead, and that margin covers their way
//     to kube-apiserver: 5s with the defaults (leaseDuration 15s,
//     renewDeadline 10s, retryPeriod 2s). The configuration requires
//     leaseDuration > renewDeadline > retryPeriod; the agent refuses to
//     start when leaseDuration in whole seconds is not greater than
//     renewDeadline.
//
// retryPeriod is how often the leader renews: normally S is at most 2s old
// and the fence is far from closing. It closes only when renewals have
// failed or hung for renewDeadline. When it closes the agent also cancels
// the collector's context, and exits if the collector has not stopped
// within leaseDuration - renewDeadline. A write refused in the window's
// last second is not the end of the run, though: the context ends only
// once the window is over, and a renewal sent in that second reopens the
// fence without cancelling anything (the run goes on with the same graph
// and queues). So a refused write is tried again a second later, not
// dropped (a dependent left behind would stay until the next leader
// change, an owner's foregroundDeletion or orphan finalizer forever); it
// counts no action error, and the first refusal since a write was last
// sent is logged at V(2). client-go alone would not keep the
// bound: with ReleaseOnCancel its renew loop gives up at renewDeadline,
// then tries to release the lease for up to another renewDeadline, and
// only then ends the leader's context: writes could be sent until about
// retryPeriod + 2 x renewDeadline (22s) after S, when another instance may
// lead after 15s. On SIGTERM the lease is released only once the collector
// has stopped, and never when the last read of the Lease showed another
// holder (client-go would overwrite the new leader's record).
//
// The check is in the transport so that a frozen process (SIGSTOP, a
// suspended machine) is covered too: on resuming, a worker goes on
// wherever it was, before anything could cancel it, but its next request
// still asks. Time since S is the larger of the monotonic and the
// wall-clock difference, as a suspended machine's monotonic clock stands
// still. What remains is a request that passed the check in the
// microseconds before a freeze and is sent after it; like every write it
// carries the UID (and resourceVersion) its decision saw as preconditions.
// The check needs one of the two clocks to count the time the machine did
// not run: a virtual machine paused by its hypervisor whose guest clocks
// stop too (KVM's kvmclock counts only while the VM runs, and the wall
// clock stays behind until NTP corrects it) is not covered. Its writes go
// on from a stale graph until its next renewal finds the lease taken, up to
// retryPeriod (2 s) and a round trip after it resumes; deletes and
// reference patches carry their decision's preconditions, but the removal
// of an orphan or foregroundDeletion finalizer checks only the UID. The
// server-side timeout counts from the check, not from the send: a write
// that waits for a connection after the check reaches kube-apiserver with
// a timeout past the window, up to the dial's wait (the collector's
// requests time out at the request timeout, and its workers stop when the
// window closes). A write already sent on a connection that then stalls
// open (a half-open TCP connection, a partition) may reach kube-apiserver
// later still, once the path heals, while the kernel retransmits it: the
// same preconditions bound what it can do (a late finalizer removal can cut
// short the wait for a dependent created meanwhile; it cannot delete an
// object whose owner exists).
//
// Lease requests do not queue behind the collector's: the election has a
// client of its own, with its own rate limiter, a timeout of renewDeadline/2
// per request, and its own connection (client-go otherwise shares one
// HTTP/2 connection between clients with equal TLS settings). Its user
// agent is nodegc-leader-election/<identity>, the collector's is
// UserAgent/<identity> (Options.Identity), so that the API server's audit
// log tells the instances apart.
//
// # What the graph trusts (safety rules 3 and 4)
//
// An owner reference is classified from the graph only when the graph is
// certain: the owner was observed alive at the stated coordinates (solid or
// waiting; under another name too, see "# Namespaces"), or its deletion was
// observed (dangling: UIDs are never reused), while the monitor of the owner's
// resource follows the API server (see "# An etcd restore").
// An owner the graph has never observed is a virtual node, and absence from
// a cache is never taken as proof: a live GET decides (NotFound about the
// object itself, or another UID: dangling; a 404 about its resource, such
// as a version no longer served, proves nothing and the dependent waits),
// and its verdict is kept on the virtual node and in a small absent-owner
// cache so that the owner's other dependents need no request.
// Concurrent lookups of one owner share one request. An owner a GET finds
// present but the graph has not observed (its watch event still on its
// way; or its resource not watched: in gcIgnoredResources, without the
// watch verb, or its monitor failed) is read again later, once for all its
// dependents: the verdict "present" is kept for the owner (presentCache),
// a second after the first GET, then twice as long after each GET that
// finds it still there, up to maxRetryDelay (5 minutes); its dependents
// take it without a request, and look again when it ends. So such an owner
// costs one GET per period, however many dependents it has
// (kube-controller-manager re-queues the virtual owner, not its
// dependents), and its deletion is found within a period. That verdict
// only ever keeps a dependent: an owner deleting in the foreground is read
// each time, a lookup that finds the owner absent ends it, and neither the
// absent-owner cache nor an owner's deletion the graph observed is ever
// overruled by it.
// What the graph proved holds also once the owner's kind has left discovery
// (its CRD deleted, and the owner with it): an owner whose deletion was
// observed, or that a lookup found absent at the stated coordinates, is
// dangling all the same, and a cluster-scoped dependent takes the owner's
// scope from the graph (the namespace the owner was observed in, alive or
// deleted), as kube-controller-manager consults its absent-owner cache
// before discovery. Only a reference the graph cannot classify waits for a
// discovery round that knows its kind. Such an object, and one whose
// owner's lookup keeps failing (RBAC, an aggregated API down), is neither
// deleted nor kept for good: it counts in nodegc_owner_gc_undecided_items
// by reason while it waits, and is logged once per run at the default
// verbosity (undecided.go). A stale graph can only
// delay a deletion, never cause a wrong one: every delete carries the UID
// and resourceVersion the decision saw as preconditions, and every patch is
// an RFC 6902 JSON patch whose test operations check the UID (and, where the
// decision depends on the rest of the object, the resourceVersion). An
// object its API server gives without a resourceVersion (an aggregated API
// server of its own storage may) offers no version to check: it is read
// before it is deleted or its references patched, and decided on as read,
// as kube-controller-manager does for every object. A
// write refused because the object changed (a delete whose preconditions
// failed: a 409 after which a GET finds the object gone or at another
// resourceVersion; a JSON patch whose test failed, 422 with
// kube-apiserver's generic message and no details) re-reads the object and
// decides once more. Any other refusal is an action error, a 409 or a 422
// included (an admission policy or webhook that denies the write: a
// webhook may deny with any code, and one that answers 409, "in use",
// leaves the object as the delete's preconditions state; a patch's 409,
// as the patches state no precondition but their tests; a CRD's
// validation rule): logged at error level with the object and the
// server's message, counted in nodegc_owner_gc_action_errors_total, and
// retried with the item's backoff.
//
// A delete refused only because the object changed (409 on its
// resourceVersion) is sent again with the UID precondition alone when the
// object's owner references and deletion finalizers are what the decision
// saw, as kube-controller-manager does: an object updated more often than a
// round trip is still collected.
//
// The graph also learns from the API server's answers. A relist (after a
// watch could not resume) is the whole resource: the observed objects of
// the resource missing from it were deleted meanwhile, among them a name's
// previous object when the name was reused (feed.go). A GET answered 404
// about the object, or one that finds another UID under the name, proves
// the UID gone: the worker sends its deletion through the FIFO. Otherwise
// such a "ghost" would stay observed, its dependents would keep a live
// owner and a foreground deletion waiting for it would wait forever. A
// write's 404 proves nothing by itself (an admission webhook may deny a
// write with a 404 of its own, passed on as it wrote it): it is checked
// with a GET, which no webhook sees (confirmGone), and is an error,
// retried, while the object is there.
//
// # An etcd restore
//
// UIDs are never reused, but etcd restored from a backup brings deleted
// objects back with theirs, and the monitor of a dependent's resource may
// deliver a restored dependent before the owner's monitor has relisted. So
// an owner's absence the collector knows (its deletion observed, a lookup
// that found nothing at its identity, the absent-owner cache) is proof only
// while the monitor of the owner's resource follows the API server. From a
// failure of its list or watch (every kube-apiserver restarts in a
// restore), or a watch that ends too old or too new for the server, until
// its relist is applied or its resumed watch has caught up, and while a
// monitor started again has not synced, the owner is read with a GET that
// the absent-owner cache does not answer (at the version the graph knows
// its kind by, if the reference's is no longer served), and a GET that
// finds it drops it from that cache; the owner's state is taken from the
// graph again once its monitor follows (it may have caught up since the
// worker's view). So is an owner the graph holds deleting in the
// foreground: a backup taken before that delete brings it back not being
// deleted, and its dependents restored with it would otherwise go as a
// waiting owner's (the owner's deletion in the foreground, like its
// absence, is read, as kube-controller-manager reads every owner; a
// reference that misnames it waits for the monitor), and an owner the
// graph holds orphaning its dependents is read before they are patched
// (attemptToOrphan; kube-controller-manager orphans them from its graph,
// and the restored dependents of an owner that stays would lose their
// references). The price: while the API serving an owner's resource is
// down (an aggregated API server, a CRD's conversion webhook), the
// dependents of its deleted owners wait for it, and for some seconds after
// each kube-apiserver restart a dependent of a deleted owner costs a GET.
// When nothing lags, the check costs each owner reference a cached REST
// mapping, two short mutex holds and a read of the graph: 220-420 ns
// (BenchmarkMarkUnsureAbsence), under 0.5% of a deletion's CPU.
// A resource whose monitor never synced (its list forbidden or failing
// from the start) is judged by look-ups and the absent-owner cache, as
// kube-controller-manager judges every resource. With leader election, a
// restore that keeps every kube-apiserver down for longer than
// renewDeadline ends the leader's run anyway: the next starts from an empty
// graph and empty caches.
//
// A restore made as Kubernetes documents it (etcdutl snapshot restore with
// --bump-revision and --mark-compacted, every kube-apiserver restarted)
// makes every watch relist, which the collector follows as above. Without
// --mark-compacted a watch may resume past the restored objects, which the
// collector cannot tell (kube-controller-manager neither): restart the
// owner GC (delete the nodegc-owner pods) after such a restore, as
// Kubernetes says of its controllers. After a restore without a revision
// bump, the resource versions the builder has recorded for each resource
// stay above the new objects' until the values pass them, so the wait for a
// misnamed owner's watch (ownerWatchLagBound) does not hold meanwhile, and
// a misnamed reference is judged as kube-controller-manager judges it;
// every read of an object kept unmonitored is dropped as older than the
// graph's copy (builder.refresh), which stays as before the restore until
// the values pass it.
//
// # Synced
//
// A run is synced once discovery succeeded and every monitor's initial list
// has been applied to the graph (a marker event follows the list through
// the FIFO), or the monitor failed: its list/watch kept failing for 10s, or
// it has not synced within a minute (a list can hang without an error). A
// failed monitor is logged and counted
// (nodegc_owner_gc_monitors{state="failed"}), keeps retrying, and no
// longer holds back the others. Workers start when the run is first
// synced. HasSynced is the readiness of the owner GC.
//
// An initial list is a consistent list (no resourceVersion), never one of
// "any version" (resourceVersion=0, what client-go's reflector asks for
// first): kube-apiserver answers the latter from its watch cache even when
// that cache cannot initialize (a CRD whose conversion webhook is down),
// with an empty list and no error. The monitor would count as synced on a
// graph without a single object of the resource, and an orphaning or a
// foreground deletion would miss its dependents there. A consistent list
// of such a resource fails, and the monitor counts as failing, then
// failed.
//
// A monitor that synced can fail later (its list or watch errors: the API
// server restarts, a conversion webhook goes down). It is then failing
// (nodegc_owner_gc_monitors{state="failing"}) until the graph has caught
// up (see "# Holding finalizers while the graph may miss a dependent");
// every failure is counted
// (nodegc_owner_gc_monitor_errors_total) and logged at error level (the
// first of a run, then once a minute); a watch that simply ended is no
// failure.
//
// # Start-up
//
// Until it has synced the collector can do nothing, so the time to read
// every object of every resource is its start-up. On 2 cores, with 100,000
// objects, that is two processes busy: kube-apiserver encoding the
// objects' metadata and the collector reading them. What each monitor
// does:
//   - list its resource once, consistent (see "# Synced") and whole (no
//     limit), then watch from the list's resourceVersion. kube-apiserver
//     1.31 and later serve such a list from the watch cache once the cache
//     is as recent as etcd; older versions read it from etcd. Not a
//     streaming list (a watch that sends every object as an initial
//     event: client-go's default since 1.35, and kube-controller-manager's
//     way): kube-apiserver deep-copies each object it streams to a
//     watcher, which was a third of its CPU time in a start-up, and a list
//     costs it no copy. Not in pages of 500 either: one request per 500
//     objects, in turn, made the start-up half as long again (1.2 s
//     against 0.8 s).
//   - ask for it uncompressed (metaclient.go): gzip was a fifth of
//     kube-apiserver's CPU time for a list, and inflating it a fifth of
//     the collector's; a streaming list was never compressed either.
//   - decode it as it arrives (codec.go): the API server's protobuf goes
//     straight into the fields the graph keeps, one object at a time,
//     skipping labels, annotations and managed fields unread (the metadata
//     client decodes everything: 3.5 times the CPU in a profile). The
//     response's bytes, mostly managed fields, are never held whole.
//   - queue it for the builder, in batches, in a queue of fixed-size
//     chunks (a backlog of a whole list never gets copied);
//   - insert it into the graph. While the run's initial lists come in (in
//     any order across resources), a dependent inserted before its owner
//     is not queued for a worker, nor when the owner arrives: at the end
//     of the lists (evRunSynced) one pass queues the dependents whose
//     owners still need a look.
//
// Where the time goes, with 100,000 objects in three resources (profiled
// in BenchmarkOwnerGC): kube-apiserver spends 0.7-0.9 s of CPU serving the
// three lists (1.3-1.6 s for the streaming lists before), the collector
// 0.5-0.6 s (about 1 s), a fifth of it in its garbage collector; the
// start-up went from 1.3-1.5 s to 0.7-1.0 s.
//
// BenchmarkOwnerGC measures the start-up side by side with
// kube-controller-manager's garbage collector.
//
// # Holding finalizers while the graph may miss a dependent
//
// Removing a foregroundDeletion finalizer and finishing an orphaning are the
// two decisions that need every dependent of the owner in the graph (a
// missed dependent would outlive its owner, or be deleted later although
// the user asked to orphan it). They wait while any monitor is still
// syncing; and, going beyond kube-controller-manager (which finishes once
// its monitors synced, failing ones included), they hold the finalizer
// while a resource that could hold the owner's dependents (any resource for
// a cluster-scoped owner, the namespaced ones otherwise) is syncing, failed
// or failing, or left discovery while it held dependents of this owner
// (graph.lostTo: a version no longer served, whose objects still exist;
// until its monitor is back and synced); while a group version fails
// discovery that, when this process last read it, served a resource the
// collector monitors (list, watch and delete, not ignored), or that this
// process never read (what it serves is unknown), for every owner; a group
// version read before that served nothing to monitor (metrics.k8s.io: get
// and list only) holds nothing (groupVersions, discovery.go); and until a
// discovery round that began after the hold has completed (so that a CRD
// created just before has a monitor; the round is started at once). The
// hold lasts at most ownerGC.unsyncedResourceHold (default 10m, 0 turns it
// off), measured from the first time this run held the owner in this
// episode (a wait for dependents the graph shows, or for an orphaning write
// that failed, ends an episode: hold.go), also while
// every discovery round fails whole; the owner gets a Warning Event
// DependentsUnknown naming the resources (or API discovery, once a round
// begun after the hold failed), and when the bound expires the collector
// finishes as kube-controller-manager would, with a Warning
// UnsyncedResourceHoldExpired and an error log (see hold.go).
//
// A resource that stays in discovery but loses the list, watch or delete
// verb while its objects exist (an aggregated API server's change, a
// built-in one after an upgrade) is no resource that left discovery: its
// objects can still be read and patched through the REST mapping. Its
// monitor stops, and the graph keeps its observed nodes, marked
// unmonitored (builder.resourceUnmonitored; no graph.lostTo, no hold), as
// kube-controller-manager keeps the nodes of a monitor it stops. So an
// owner of it whose deletion in the foreground or with orphan had begun
// when its monitor stopped is still woken when its last blocking
// dependent goes, and orphaning still sees its dependents; a dependent
// there of an owner orphaning is orphaned with a patch, not unlinked and
// deleted once its resource is monitored again. Unlike
// kube-controller-manager, nothing is decided on those stale copies: a
// worker reads such an object before it decides (processUnmonitored; the
// read refreshes the node, evRefresh), and reads again after acting and,
// while it is being deleted, until it is gone (no event would tell): at
// growing intervals while the collector waits on it, hourly otherwise; its dependents look it up as a virtual owner
// (resolveOwner); a read or lookup that finds it gone drops it. An owner
// whose deletion begins after its monitor stopped is seen only when a
// monitored dependent looks it up (when queued, then at least every
// maxRetryDelay while the owner is there): what the lookup read refreshes
// the node too (refreshKept, at the node's identity; no extra request),
// which queues the owner as a monitor's update would. An owner no
// monitored dependent looks up is not read: its finalizer stays, and the
// stuck scanner, which reads the graph's copy, does not see it
// (kube-controller-manager never learns of it either). When the resource
// is monitored again, its first list replaces the nodes, and those the
// list lacks are deleted (resourceBack); when it leaves discovery (or is
// listed without get), they turn virtual as above. As for
// kube-controller-manager, objects created there after the monitor
// stopped are unseen: an owner orphaning may finish without orphaning
// one, which is deleted if the resource is monitored again. The stuck
// scanner sees the owners being deleted that the graph's copies show, and
// explain says that their resource is no longer monitored.
//
// The kept nodes live in the graph of the run that saw the loss only. A
// run that starts after it (a restart, a rollout, a lost Lease: a new
// leader) never observes them, and no hold waits for such a resource: its
// objects are as objects created after the loss, as for
// kube-controller-manager after a restart. (Holding for resources listed
// with get but never monitored would make every orphan deletion wait the
// whole hold in any cluster serving one, such as metrics.k8s.io, which
// serves get and list, never watch.) A kept object that stays being
// deleted (another finalizer that nobody removes, such as one of the
// broken aggregated API's own controller) is read again, twice per
// attempt, each at its own pace: while the collector waits on it
// (waitedOn: its own foregroundDeletion or orphan finalizer, dependents in
// the graph, a blocking reference to an owner deleting in the foreground),
// from a second doubling to maxUnmonitoredPoll (10 minutes); otherwise
// every idleUnmonitoredPoll (an hour), to see a foregroundDeletion or
// orphan finalizer that a later DELETE adds to it (kube-apiserver adds
// them to an object being deleted), which no event would tell and which
// only the collector removes. Not through the delete queue's retries,
// whose rate limiter (10/s for all items) thousands of them would hold,
// slowing every other retry; a read that fails is tried again at the same
// pace (1 second doubling to 10 minutes), for the same reason.
// A kept object that is not being deleted and that nobody looks up (no
// monitored dependent) is not read; it stays in the graph until its
// resource is monitored again or leaves discovery, or the run ends.
//
// What ends a failure is the graph catching up, not a request returning: a
// relist counts from the moment it is due (a watch that ends because its
// version is too old, which the reflector follows with a relist after its
// backoff, up to half a minute, telling no handler) or begins, until its
// evRelisted is applied (the objects created meanwhile are in the graph
// then); the watch opened right after it does not end a failure before
// that, and a failure noted after the last list or watch that succeeded
// survives it. Every relist is consistent, not served from the watch cache
// at the last version seen. A watch the reflector opens again from the
// last version it saw after a refused connection or a 429 (whether or not
// a relist is still to be applied: the watch's events come behind it)
// first sends what changed meanwhile, and those events may still
// be on their way to the graph when it opens: the monitor reads the
// current resource version then (a consistent list of one object), and
// the failure ends when the graph has applied an event or bookmark of the
// watch at or after it (evCaughtUp follows it through the FIFO; the
// hold names the resource "catching up after a failure"). kube-apiserver
// sends a watch a bookmark about once a minute, so a resource that does
// not change catches up within a minute. A watch that has not caught up
// within two minutes (one served by etcd directly, whose bookmarks come
// every ten) is ended, and the resource relisted; so is one whose
// versions are not numbers (an aggregated API server of its own storage)
// at once. A list or watch refused with 429 (a CRD's storage
// re-initializing because its list fails, or throttling) or a refused
// connection counts as a failure at once: monitors' requests make no
// retries of their own (client-go would retry a 429 for half a minute and
// more), and the reflector retries a watch's 429 without telling its
// error handler. And the hold is looked at after
// the dependents known at the start of the attempt were orphaned: the view
// is taken again then, and an orphaning or a foreground deletion that finds
// a dependent it did not know (brought by a resource that recovered
// meanwhile) goes round again, with the item's backoff, before the
// finalizer goes.
//
// # Fewer requests
//
// In a Background cascade each dependent is judged from the graph (its
// owner's deletion was observed) and deleted with one DELETE; its item is
// never re-read (but for an object without a resourceVersion, see "# What
// the graph trusts"). kube-controller-manager reads the item and its owner before
// every delete. Owner finalizers are removed and references patched without
// reading the object first either. The API client counts its requests by
// verb (nodegc_owner_gc_api_requests_total).
//
// A DELETE asks for its answer as metadata (PartialObjectMetadata, as the
// monitors' lists and watches do; metaclient.go). Many deletes answer with
// the object: every Pod, PersistentVolumeClaim, Service and ServiceAccount
// deleted, and any object whose deletion waits on a finalizer or a grace
// period (a Pod on a node, a custom resource an operator holds). The
// collector reads only the answer's status, so kube-apiserver need not
// convert and encode the rest, nor the collector receive it; a Status, and
// every error, come back as before. kube-controller-manager's deletes get
// the whole object. BenchmarkDeleteAnswer (two runs of 8 rounds of 1,000
// deletes each way, 20 at a time): a ReplicaSet's Pods answered with 2,453
// bytes against 3,255 (the metadata keeps the managed fields), the
// client's CPU per delete unchanged (298 and 365 us against 303 and 373);
// custom resources with 16 KiB of spec, held by a finalizer, answered with
// 404 bytes against 19,137 of JSON, the client spending 0.72x and 0.68x
// the CPU per delete (303 and 340 us against 420 and 501).
// kube-apiserver's CPU per delete did not measurably change: 0.89x-1.03x
// for the Pods in six runs (95% intervals of 10-22% either side),
// 0.86x-1.09x for the custom resources in four (33-43%): its background
// work moves a round of a few seconds by more than the answer costs. The
// longer header costs kube-apiserver about a microsecond per delete to
// negotiate, answers with a Status (the ConfigMaps of BenchmarkOwnerGC)
// included: 1.3 us against 0.4 in a micro-benchmark of its
// NegotiateOutputMediaType (apiserver 0.34, not in this repository), about
// 0.1% of what it spends on a delete.
//
// # Rate
//
// Unthrottled, a cascade keeps every core busy, so its rate is the inverse
// of the CPU that kube-apiserver, etcd and the collector spend per
// collected object; on 2 cores every microsecond the collector spends is
// taken from the API server. The client-side rate limit is off with
// kubeAPIQPS -1 (Priority and Fairness then paces the collector); the
// default, 40, is kube-controller-manager's effective limit.
//
// What keeps the collector's cost per object near that of a plain loop of
// DELETEs:
//   - one request per collected object (# Fewer requests), built and sent
//     about as cheaply as by client-go's typed client (BenchmarkDelete:
//     1.02x its client time, 0.96x its bytes, 0.91x its allocations);
//   - an owner's dependents queued in storage order (kind, namespace,
//     name: enqueueDependents), the order in which kube-apiserver's watch
//     cache and etcd keep them. In random order (a Go map's, as
//     kube-controller-manager deletes) a large cascade's lookups miss the
//     CPU's caches: a cascade of 50,000 ran at about 0.85x the rate (at
//     5,000 everything fits in the caches and the order makes no
//     difference);
//   - the monitors' lists and watches on a connection of their own
//     (collector.go), so a cascade's watch events do not delay the answers
//     to its deletes;
//   - GOMAXPROCS from the CPU limit (1, set by the manifests): with Go's
//     default of 2 Ps sharing one CPU's worth of time, scheduling and
//     waking a second thread cost 10-28% more CPU per object.
//
// Beyond the loop, the collector pays for the watch every collector needs
// (kube-apiserver encodes each deletion once more, the collector reads
// it) and for its own work: the decision record's log line (20-30 us in
// place), the graph and the queues, its metrics and the Go runtime, about
// 50-90 us per object in all. On shared cores each of those microseconds
// costs kube-apiserver and etcd 2-4.5 more. The 20 workers match
// kube-controller-manager's concurrent-gc-syncs; more concurrent DELETEs
// lower any deleter's cost per object.
//
// BenchmarkOwnerGC measures the rate beside kube-controller-manager and
// the loop; docs/ownergc-at-scale.md holds the measurements, where a
// deletion's CPU goes, and every lead followed with what it found.
//
// # Decision records and dry-run
//
// Every write (delete with its propagation policy, removal of owner
// references, unblocking of references, removal of a finalizer, orphaning
// of a dependent) is logged once when it succeeded, as one structured
// record "Owner GC action" with the object, the action, the rule that
// decided it and the owner references with their classification, and
// counted by action and rule. In dry-run the collector decides and records
// (once per object, action and rule) but writes nothing, Events included.
//
// # Explain and stuck deletions
//
// The decision records are also kept in memory on the Collector
// (record.go), so that they survive a new Run: by object UID and by name,
// for an hour and at most 10,000 of them, the oldest dropped first. They
// are not shared: an object gone without a record may have been deleted by
// an earlier leader, which the verdict says, with since when this instance
// leads (the start of its Run, Explanation.LeaderSince).
// Collector.Explain (explain.go, served at ExplainPath and by
// `nodegc explain`) answers "why is this object still here?": it reads the
// object live, classifies its owner references with the workers' own
// functions (judgeRef on its live view, then decide, or
// decideDeletingDependents), copies its dependents from the graph under the
// read lock, reads the finalizers of the blocking ones, and turns that and
// the records into one verdict (verdict.go, pure). It only reads: its GETs
// (the object, an owner the graph never observed, at most 20 blocking
// dependents) are neither shared with the workers' lookups nor written
// back to the graph, the absent-owner cache or the owners' verdicts of
// present. It needs this instance to run a synced Run (ErrNotRunning,
// ErrNotSynced otherwise).
//
// While a Run is synced, one goroutine (stuck.go) scans the graph every
// min(stuckDeletionThreshold/4, 1m) for objects deleted with
// foregroundDeletion or orphan. Progress is a dependent they wait for
// going (the blocking ones, or all of them for orphan) or the finalizer
// going; an object without progress for longer than the threshold gets one
// DeletionStuck Warning worded as explain's verdict, one error log line,
// and counts in nodegc_owner_gc_stuck_deletions by reason until it
// progresses or goes. The scanner's memory is its own; it reads the graph
// as the workers do.
//
// # Namespaces
//
// As upstream: a namespaced dependent whose reference names an owner UID
// that lives in another namespace treats that owner as absent (the
// reference is dangling) and gets an OwnerRefInvalidNamespace Warning; a
// cluster-scoped dependent that references a namespaced kind is never
// deleted and gets the same Warning.
//
// Unlike upstream, a reference whose UID the graph observed alive at the
// stated group and kind, in the dependent's namespace or cluster-scoped,
// holds the dependent whatever name it states (a typo, an owner's name
// written wrong by its controller): an object with that UID exists where
// the dependent may have an owner, and the owner GC never deletes an
// object whose owner exists (safety rule 4). The dependent gets an
// OwnerRefNameMismatch Warning, once per run, and goes once that owner's
// deletion is observed. kube-controller-manager looks the stated name up,
// finds nothing there (or another UID), and deletes the dependent. A
// reference of another kind than the object with its UID, or to one in
// another namespace, is judged at its stated coordinates, as upstream. A
// reference to an owner the graph has not observed is looked up at its
// stated name; a look-up that finds nothing there counts only once the
// graph applied the owner's resource up to the dependent's resource
// version, or after ownerWatchLagBound (10 s): an owner whose watch event
// is behind the dependent's (two resources' watches) keeps it meanwhile,
// and is then observed under its real name (see progress.go). An owner of
// a kind no monitor watches (ignored, without the watch verb) is judged by
// the look-up alone, as upstream.
//
// # Memory
//
// The collector keeps one copy of each object, its graph node, and no
// informer cache: a monitor's reflector hands each change to the builder
// through the FIFO and forgets it (feed.go). kube-controller-manager keeps
// every object twice, in its metadata informers' caches and in its graph.
// A node holds only what the decisions read (graph.go):
//
//	node struct (uid, name, namespace, kind, resourceVersion,
//	  owner links, dependents set, flags, resource number,
//	  finalizer positions)                                        112 B
//	uid string (36 bytes)                                          48 B
//	name string (~25-40 bytes)                                  32-48 B
//	resourceVersion string (7-8 digits)                             8 B
//	owner link (owner pointer, alternative coordinates, flags)      24 B per owner reference
//	entry in the owner's dependents set                          ~16 B per owner reference
//	entry in the uid → node index                                ~50 B
//
// Namespaces and apiVersion/kind pairs are interned: a node points at them.
// An owner link states its owner's coordinates only when they differ from
// the owner node's (a pointer, nil in the normal case). Labels,
// annotations, managed fields and timestamps are never decoded (codec.go);
// the finalizers other than foregroundDeletion and orphan are dropped
// before the object reaches the builder. BenchmarkGraphMemory measures about
// 300 bytes per object for a cluster-shaped graph of 100,000 objects (one
// owner per ten objects). BenchmarkOwnerGC (test/ownergcbench) measures
// the process: its resident memory once synced grows by about 0.4-0.6 KB
// per object between 10,000 and 100,000 objects (the live graph plus the Go
// heap's headroom and the fragmentation the initial lists leave; 1.1 KB
// while the objects were decoded whole), kube-controller-manager's by
// about 5 KB.
//
// The transient peak is the initial list: the reflector holds a resource's
// list (decoded slim as it arrives) until it is complete, and the FIFO
// holds the list's events until the builder applied them. Once the run has synced, that
// memory is handed back to the system at once (debug.FreeOSMemory), not
// after the runtime's periodic collection.
//
// # More than one instance (on paper)
//
// One instance holds the whole graph. If that were not enough, the graph
// splits along the one boundary ownership cannot cross, the namespace:
//
//   - A namespaced object's owners are in its namespace or cluster-scoped
//     (a reference to a namespaced owner elsewhere is dangling by rule). A
//     cluster-scoped object's owners are cluster-scoped.
//   - Shard k of n owns the namespaces whose name hashes to k, and shard 0
//     also owns the cluster-scoped objects as dependents. Every shard keeps
//     the cluster-scoped objects in its graph as owners (they are few:
//     nodes, namespaces, persistent volumes, cluster roles, CRDs).
//   - Each shard's feed drops the objects of other shards' namespaces
//     before they reach its graph, so memory divides by n. The watches do
//     not: the API server offers no hash selector, so each shard still
//     receives and decodes every object's metadata (a watch per namespace
//     would divide that too, at the cost of one watch per namespace and
//     resource).
//   - Everything about a namespaced owner stays in its shard: its
//     dependents, its foreground deletion, its orphaning. A cluster-scoped
//     owner's dependents may be in every shard. Each shard deletes or
//     orphans its own; the owner's foregroundDeletion or orphan finalizer
//     may go only when every shard has none left, so shard 0 removes it
//     after each shard has reported, for that owner UID and a
//     resourceVersion at or after the owner's deletion, that it holds no
//     blocking dependent (foreground) or no dependent still referencing it
//     (orphan). A shard reports on its own Lease (below), in an annotation
//     listing the cluster-scoped owners being deleted that it has finished
//     with; shard 0 reads the n Leases.
//   - The shards are assigned with Leases: one coordination.k8s.io Lease
//     per shard (nodegc-ownergc-<k>), held through client-go leader
//     election as the single collector's Lease is today, each instance
//     taking at most ceil(n / instances) of them; the lease fence (fence.go)
//     then guards each shard's writes as it guards the single collector's.
//     n is fixed by configuration; changing it means every shard restarts
//     from an empty graph, as after a lost lease.
//
// # Lifecycle
//
// Run blocks until its context ends. Cancelling the context cancels every
// in-flight request and starts none; Run then closes the FIFO (the events
// the graph builder has not applied are dropped: the graph goes with the
// Run), shuts the queues down, lets the workers finish their current item,
// stops the monitors and returns. The next Run starts from an empty graph.
package ownergc
