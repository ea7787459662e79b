package ownergc

import (
	"context"
	"fmt"
	"slices"
	"strconv"

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
// given coordinates stays absent (UIDs are never reused).
type absentCache struct{ c *lru.Cache }

func newAbsentCache(size int) *absentCache { return &absentCache{c: lru.New(size)} }

func (a *absentCache) add(k ownerKey) { a.c.Add(k, struct{}{}) }

func (a *absentCache) has(k ownerKey) bool {
	_, ok := a.c.Get(k)
	return ok
}

// lookupResult is the verdict of a live lookup.
type lookupResult struct {
	class  refClass
	reason string
}

// lookupOwner classifies the owner at key with a GET, unless the
// absent-owner cache already knows; concurrent lookups of one key share a
// single request.
func (r *run) lookupOwner(ctx context.Context, key ownerKey, apiVersion string) (lookupResult, error) {
	if r.absent.has(key) {
		r.c.metrics.lookups.WithLabelValues(lookupCachedAbsent).Inc()
		return lookupResult{class: classDangling, reason: reasonNotFound}, nil
	}
	return r.flights.do(key, func() (lookupResult, error) {
		res, err := r.readOwner(ctx, key, apiVersion)
		if err != nil {
			r.c.metrics.lookups.WithLabelValues(lookupError).Inc()
			return res, err
		}
		if res.class == classDangling {
			r.c.metrics.lookups.WithLabelValues(lookupAbsent).Inc()
			r.absent.add(key)
			r.events.push(event{typ: evOwnerAbsent, owner: &key})
		} else {
			r.c.metrics.lookups.WithLabelValues(lookupPresent).Inc()
		}
		return res, nil
	})
}

// readOwner reads the owner at key with one GET and classifies it. Only a
// 404 about the object itself means absent: a 404 about its resource (a
// version no longer served since the last discovery) is an error, and the
// dependent waits. It records nothing: see lookupOwner.
func (r *run) readOwner(ctx context.Context, key ownerKey, apiVersion string) (lookupResult, error) {
	obj, err := r.getObject(ctx, objectID{uid: key.uid, apiVersion: apiVersion, kind: key.kind, namespace: key.namespace, name: key.name})
	switch {
	case objectNotFound(err, key.name):
		obj = nil
	case err != nil:
		return lookupResult{}, err
	}
	return lookupVerdict(key, obj), nil
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

func (f *flights) do(key ownerKey, fn func() (lookupResult, error)) (lookupResult, error) {
	v, err, _ := f.g.Do(key.String(), func() (any, error) { return fn() })
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
