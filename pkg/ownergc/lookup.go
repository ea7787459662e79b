package ownergc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
)

// absentCacheSize bounds the absent-owner cache. Most verdicts also live in
// the graph (tombstones, virtual nodes marked absent); the cache covers
// references whose coordinates differ from their owner node's identity.
const absentCacheSize = 1000

// absentCache remembers lookups that found no owner: an owner UID absent at
// given coordinates stays absent (UIDs are never reused), unless etcd is
// restored from a backup: a fresh lookup (see judgeRef) passes it by, and
// drops an owner it finds.
type absentCache struct{ c *lru.Cache }

func newAbsentCache(size int) *absentCache { return &absentCache{c: lru.New(size)} }

func (a *absentCache) add(k ownerKey) { a.c.Add(k, struct{}{}) }

// drop forgets k: a lookup found it present (an etcd restore brought it
// back, or the cache's entry was never checked since).
func (a *absentCache) drop(k ownerKey) { a.c.Remove(k) }

func (a *absentCache) has(k ownerKey) bool {
	_, ok := a.c.Get(k)
	return ok
}

// presentFirst is how long a lookup's first verdict that an owner the
// graph has not observed is present holds; each verdict after it holds
// twice as long as the one before, up to maxRetryDelay.
const presentFirst = time.Second

// presentCache keeps, per owner, a lookup's verdict that an owner the graph
// has not observed exists (its watch event still on its way; or its
// resource not watched: ignored, without the watch verb, its monitor
// failed), for a time: until then every dependent of the owner takes it as
// present without a request, and looks again when it ends (see
// run.process). So an owner is read once per period, which answers all its
// dependents, as kube-controller-manager re-queues a virtual owner rather
// than its dependents. The period grows as the absent-owner cache's
// verdicts never need to (they hold for good): from presentFirst, doubling
// at each GET that finds the owner still there, up to maxRetryDelay.
//
// A verdict here only ever keeps a dependent: it is solid, never waiting
// (an owner being deleted in the foreground is read each time), and it is
// consulted only for a reference the graph cannot classify (an owner's
// deletion the graph observed, or that a lookup found, wins: see judgeRef
// and lookupOwner). A lookup that finds the owner absent, or deleting in
// the foreground, drops it.
type presentCache struct {
	mu      sync.Mutex
	entries map[ownerKey]presentEntry
	swept   time.Time
}

// presentEntry is an owner's verdict: present until until, which was hold
// after the GET that found it.
type presentEntry struct {
	until time.Time
	hold  time.Duration
}

// fresh returns until when k's verdict holds at now.
func (p *presentCache) fresh(k ownerKey, now time.Time) (until time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.entries[k]
	if !ok || !now.Before(e.until) {
		return time.Time{}, false
	}
	return e.until, true
}

// add records that a GET at now found k present, and returns until when
// that holds. Entries that ended more than maxRetryDelay ago are dropped
// (at most once per maxRetryDelay): their owners' dependents, which look
// again when a verdict ends, no longer ask (decided otherwise, gone, or
// the owner observed since).
func (p *presentCache) add(k ownerKey, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[ownerKey]presentEntry{}
	}
	if now.Sub(p.swept) >= maxRetryDelay {
		for key, e := range p.entries {
			if now.Sub(e.until) > maxRetryDelay {
				delete(p.entries, key)
			}
		}
		p.swept = now
	}
	e := p.entries[k]
	e.hold = min(max(2*e.hold, presentFirst), maxRetryDelay)
	e.until = now.Add(e.hold)
	p.entries[k] = e
	return e.until
}

// drop forgets k's verdict.
func (p *presentCache) drop(k ownerKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, k)
}

// lookupResult is the verdict of a live lookup.
type lookupResult struct {
	class  refClass
	reason string
	// until is when a verdict that the owner is present (solid) ends, and
	// the owner is to be read again (presentCache); zero for the others.
	until time.Time
}

// lookupOwner classifies the owner at key with a GET, unless the
// absent-owner cache or the present-owner cache already knows (when fresh,
// only the present-owner cache, whose verdict only keeps a dependent);
// concurrent lookups of one key share a single request.
func (r *run) lookupOwner(ctx context.Context, key ownerKey, apiVersion string, fresh bool) (lookupResult, error) {
	if res, ok := r.cachedLookup(key, fresh); ok {
		return res, nil
	}
	return r.flights.do(key, fresh, func() (lookupResult, error) {
		// A flight of key that ended since the look above may have
		// answered.
		if res, ok := r.cachedLookup(key, fresh); ok {
			return res, nil
		}
		res, live, err := r.readOwner(ctx, key, apiVersion)
		if err != nil {
			r.c.metrics.lookups.WithLabelValues(lookupError).Inc()
			return res, err
		}
		if live != nil && live.UID == key.uid {
			r.refreshKept(key, live)
		}
		switch res.class {
		case classDangling:
			r.c.metrics.lookups.WithLabelValues(lookupAbsent).Inc()
			r.present.drop(key)
			r.absent.add(key)
			r.events.push(event{typ: evOwnerAbsent, owner: &key})
		case classSolid:
			r.c.metrics.lookups.WithLabelValues(lookupPresent).Inc()
			r.absent.drop(key) // a fresh lookup's
			res.until = r.present.add(key, r.c.clock.Now())
		default:
			r.c.metrics.lookups.WithLabelValues(lookupPresent).Inc()
			r.absent.drop(key)
			r.present.drop(key) // deleting in the foreground: read each time
		}
		return res, nil
	})
}

// cachedLookup answers a lookup of key from the absent-owner cache (not
// when fresh), then from the present-owner cache, without a request.
func (r *run) cachedLookup(key ownerKey, fresh bool) (lookupResult, bool) {
	if !fresh && r.absent.has(key) {
		r.c.metrics.lookups.WithLabelValues(lookupCachedAbsent).Inc()
		return lookupResult{class: classDangling, reason: reasonNotFound}, true
	}
	if until, ok := r.present.fresh(key, r.c.clock.Now()); ok {
		r.c.metrics.lookups.WithLabelValues(lookupCachedPresent).Inc()
		return lookupResult{class: classSolid, reason: reasonPresent, until: until}, true
	}
	return lookupResult{}, false
}

// readOwner reads the owner at key with one GET and classifies it; live
// is what it read (nil: NotFound). Only a 404 about the object itself
// means absent: a 404 about its resource (a version no longer served since
// the last discovery) is an error, and the dependent waits. It records
// nothing: see lookupOwner.
func (r *run) readOwner(ctx context.Context, key ownerKey, apiVersion string) (res lookupResult, live *metav1.PartialObjectMetadata, err error) {
	obj, err := r.getObject(ctx, objectID{uid: key.uid, apiVersion: apiVersion, kind: key.kind, namespace: key.namespace, name: key.name})
	switch {
	case objectNotFound(err, key.name):
		obj = nil
	case err != nil:
		return lookupResult{}, nil, err
	}
	return lookupVerdict(key, obj), obj, nil
}

// refreshKept hands the graph live, the owner at key as a lookup just read
// it (its UID), when the graph keeps that owner unmonitored (observed at
// key's identity, its resource no longer monitored): no event would tell
// the graph that its deletion began, in the foreground or with orphan,
// after its resource lost a verb, and the graph's copy is what queues it
// when a dependent goes (builder.unlinkOwners) and what the stuck scan
// reads. The refresh queues it as a monitor's update would
// (builder.upsert); it is dropped if the graph's copy is newer or the node
// is monitored again by then (builder.refresh). Workers still read the
// owner before acting on it (processUnmonitored).
func (r *run) refreshKept(key ownerKey, live *metav1.PartialObjectMetadata) {
	if r.graph.keptUnmonitored(key) {
		r.events.push(event{typ: evRefresh, obj: live, owner: &key})
	}
}

// lookupVerdict classifies the owner at key from what a GET there returned
// (nil: NotFound).
func lookupVerdict(key ownerKey, obj *metav1.PartialObjectMetadata) lookupResult {
	switch {
	case obj == nil:
		return lookupResult{class: classDangling, reason: reasonNotFound}
	case obj.UID != key.uid:
		return lookupResult{class: classDangling, reason: reasonUIDMismatch}
	case obj.DeletionTimestamp != nil && slices.Contains(obj.Finalizers, metav1.FinalizerDeleteDependents):
		return lookupResult{class: classWaiting, reason: reasonWaiting}
	default:
		return lookupResult{class: classSolid, reason: reasonPresent}
	}
}

// flights lets concurrent lookups of one key share one request: the
// first runs it, the others wait for its result (its error included). A
// lookup that starts after it ended makes a new request.
type flights struct{ g singleflight.Group }

// do runs fn, the lookup of key, unless one is in flight, whose result it
// shares. A fresh lookup shares only another fresh one's: the others may
// answer from the caches.
func (f *flights) do(key ownerKey, fresh bool, fn func() (lookupResult, error)) (lookupResult, error) {
	k := key.String()
	if fresh {
		k = "fresh " + k
	}
	v, err, _ := f.g.Do(k, func() (any, error) { return fn() })
	res, _ := v.(lookupResult)
	return res, err
}

// String is k as a string that tells every two keys apart (each field
// quoted): the key of its lookup in flights.
func (k ownerKey) String() string {
	return strconv.Quote(string(k.uid)) + " " + strconv.Quote(k.group) + " " + strconv.Quote(k.kind) + " " +
		strconv.Quote(k.namespace) + " " + strconv.Quote(k.name)
}

// reportInvalidNamespace records the OwnerRefInvalidNamespace Warning on
// item, once per reference and run (upstream's event and message). In
// dry-run nothing is written, so only the log says it.
func (r *run) reportInvalidNamespace(item objectID, o *ownerView) {
	if !r.firstReport("OwnerRefInvalidNamespace", item, o) {
		return
	}
	r.logger.V(2).Info("Owner reference does not exist in the object's namespace", "object", item, "owner", o.uid,
		"ownerKind", o.kind, "ownerName", o.name)
	r.warn(item, "OwnerRefInvalidNamespace", fmt.Sprintf("ownerRef [%s/%s, namespace: %s, name: %s, uid: %s] does not exist in namespace %q",
		o.apiVersion, o.kind, item.namespace, o.name, o.uid, item.namespace))
}

// reportMisnamed records the OwnerRefNameMismatch Warning on item, once per
// reference and run: its reference o states another name than the owner's,
// which the graph observed alive with the reference's UID, group and kind
// (see judgeRef). The owner GC keeps item while that owner exists;
// kube-controller-manager would delete it.
func (r *run) reportMisnamed(item objectID, o *ownerView) {
	if !r.firstReport("OwnerRefNameMismatch", item, o) {
		return
	}
	r.logger.V(2).Info("Owner reference names its owner by another name", "object", item, "owner", o.uid,
		"ownerKind", o.kind, "ownerName", o.name, "observedName", o.node.name)
	r.warn(item, "OwnerRefNameMismatch", fmt.Sprintf("ownerRef [%s/%s, name: %s, uid: %s] names its owner wrongly: the object "+
		"with that uid is named %q; the owner GC keeps this object while that owner exists (kube-controller-manager would delete it)",
		o.apiVersion, o.kind, o.name, o.uid, o.node.name))
}

// reportKey is a Warning reported once per run: its reason, the object it
// is about and the owner reference's UID.
type reportKey struct {
	reason      string
	item, owner types.UID
}

// firstReport reports whether Warning reason about item's reference o was
// not reported before in this run.
func (r *run) firstReport(reason string, item objectID, o *ownerView) bool {
	_, seen := r.reported.LoadOrStore(reportKey{reason, item.uid, o.uid}, struct{}{})
	return !seen
}
