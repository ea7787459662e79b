package ownergc

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
)

// mapping resolves apiVersion/kind with the latest discovery snapshot: the
// stated version if served, else the group's preferred one (the objects are
// the same in every version).
func (r *run) mapping(apiVersion, kind string) (*meta.RESTMapping, error) {
	snap := r.snapshot.Load()
	if snap == nil {
		return nil, fmt.Errorf("%s %s: %w", apiVersion, kind, errUnknownKind)
	}
	key := mappingKey{apiVersion, kind}
	if res, ok := snap.mappings.Load(key); ok {
		return res.(mappingResult).m, res.(mappingResult).err
	}
	m, err := snap.mapping(apiVersion, kind)
	snap.mappings.Store(key, mappingResult{m, err})
	return m, err
}

func (snap *discoverySnapshot) mapping(apiVersion, kind string) (*meta.RESTMapping, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", apiVersion, kind, errUnknownKind)
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: kind}
	m, err := snap.mapper.RESTMapping(gk, gv.Version)
	if err != nil {
		m, err = snap.mapper.RESTMapping(gk)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", apiVersion, kind, errUnknownKind)
	}
	return m, nil
}

// scope is the scopeFunc of the latest discovery snapshot.
func (r *run) scope(apiVersion, kind string) (namespaced, known bool) {
	m, err := r.mapping(apiVersion, kind)
	if err != nil {
		return false, false
	}
	return m.Scope.Name() == meta.RESTScopeNameNamespace, true
}

// markUnsure marks owner o unsure when the graph does not hold it alive,
// or holds it deleting in the foreground (waiting), and the monitor of its
// resource lags (monitorSet.lags): it synced, and is failing, catching up
// after its watch broke, or relisting, or it is syncing (started again).
// An etcd restored from a backup taken before the owner's deletion brings
// the owner back alive with its UID, which the graph learns only once that
// monitor caught up. The resource is the kind the graph knows the owner by
// (its node's), or the reference's. An absence known through a resource
// with no monitor (a kind that left discovery, an ignored resource), one
// whose monitor never synced and failed (what it knows came from
// look-ups, as for kube-controller-manager), or of a kind discovery does
// not map stays proof. An owner the graph holds alive and not being
// deleted keeps its dependents whatever its monitor does.
//
// When the monitor does not lag, o is taken again from the graph as it is
// now: the view o comes from was taken before, and the monitor may have
// caught up in between, its relist applied (the owner back from an etcd
// restore): o's view would still have the owner absent, or waiting.
func (r *run) markUnsure(o *ownerView) {
	o.unsure = false
	apiVersion, kind := o.apiVersion, o.kind
	switch o.state {
	case ownerObserved:
		if !o.waiting {
			return
		}
		apiVersion, kind = o.node.apiVersion, o.node.kind
	case ownerDeleted, ownerAbsentAtIdentity, ownerVirtual:
		apiVersion, kind = o.node.apiVersion, o.node.kind
	}
	m, err := r.mapping(apiVersion, kind)
	if err != nil {
		return
	}
	if r.monitors.lags(m.Resource.GroupResource(), r.c.clock.Now()) {
		o.unsure = true
		return
	}
	r.graph.mu.RLock()
	*o = resolveOwner(*o, r.graph.nodes[o.uid])
	r.graph.mu.RUnlock()
}

// resourceLags reports whether the monitor of id's resource lags
// (monitorSet.lags); false for a kind discovery does not map.
func (r *run) resourceLags(id objectID) bool {
	m, err := r.mapping(id.apiVersion, id.kind)
	return err == nil && r.monitors.lags(m.Resource.GroupResource(), r.c.clock.Now())
}

// resourceClient returns the metadata client for id's resource and
// namespace.
func (r *run) resourceClient(id objectID) (metadata.ResourceInterface, error) {
	gvr, ns, err := r.location(id)
	if err != nil {
		return nil, err
	}
	c := r.c.metadata.Resource(gvr)
	if ns != "" {
		return c.Namespace(ns), nil
	}
	return c, nil
}

// location returns id's resource, and its namespace if the resource is
// namespaced.
func (r *run) location(id objectID) (schema.GroupVersionResource, string, error) {
	m, err := r.mapping(id.apiVersion, id.kind)
	if err != nil {
		return schema.GroupVersionResource{}, "", err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return m.Resource, id.namespace, nil
	}
	return m.Resource, "", nil
}

func (r *run) getObject(ctx context.Context, id objectID) (*metav1.PartialObjectMetadata, error) {
	rc, err := r.resourceClient(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.requestTimeout)
	defer cancel()
	defer r.madeProgress(ctx)
	return rc.Get(ctx, id.name, metav1.GetOptions{})
}

// getSame reads id's object again after a write was refused. gone is true
// when that object no longer exists: NotFound, or the name now holds
// another object (another UID; UIDs are never reused); the graph then
// forgets it (see forget). live is what was read, also when it is another
// object.
func (r *run) getSame(ctx context.Context, id objectID) (live *metav1.PartialObjectMetadata, gone bool, err error) {
	live, err = r.getObject(ctx, id)
	switch {
	case objectNotFound(err, id.name):
		r.forget(id)
		return nil, true, nil
	case err != nil:
		return nil, false, err
	}
	if live.UID != id.uid {
		r.forget(id)
		return live, true, nil
	}
	return live, false, nil
}

// forget tells the graph that id's object no longer exists, as the API
// server just answered (404 on a write, or another UID under its name). The
// graph may still hold it as observed when its monitor missed the deletion
// (a relist that found the name reused reports an update); without this its
// dependents would keep a "live" owner forever. The deletion goes through
// the FIFO like the monitors' events.
func (r *run) forget(id objectID) {
	r.events.push(event{typ: evDelete, obj: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{UID: id.uid}}})
}

// objectNotFound reports whether err is the API server's 404 about the
// object named name, not about its resource (a version or a CRD no longer
// served answers 404 too, although the object may well exist).
func objectNotFound(err error, name string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Name == name
}

// errGone: the object a write was meant for no longer exists (see getSame).
var errGone = errors.New("the object no longer exists")

// isGone reports whether err says the object a write was meant for is gone:
// a GET found it so (a write's own 404 proves nothing; see confirmGone).
func isGone(err error) bool {
	return errors.Is(err, errGone)
}

// deleteObject deletes id with UID and resourceVersion preconditions: a
// recreated object (new UID) or a changed one (new resourceVersion) is left
// alone and the API server answers 409 Conflict.
func (r *run) deleteObject(ctx context.Context, id objectID, rv string, policy metav1.DeletionPropagation) error {
	gvr, ns, err := r.location(id)
	if err != nil {
		return err
	}
	uid := id.uid
	pre := &metav1.Preconditions{UID: &uid}
	if rv != "" {
		pre.ResourceVersion = &rv
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.requestTimeout)
	defer cancel()
	defer r.madeProgress(ctx)
	return r.c.writes.delete(ctx, gvr, ns, id.name, metav1.DeleteOptions{Preconditions: pre, PropagationPolicy: &policy})
}

// patchObject applies a guarded JSON patch to id.
func (r *run) patchObject(ctx context.Context, id objectID, patch []byte) (*metav1.PartialObjectMetadata, error) {
	rc, err := r.resourceClient(id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.requestTimeout)
	defer cancel()
	defer r.madeProgress(ctx)
	return rc.Patch(ctx, id.name, types.JSONPatchType, patch, metav1.PatchOptions{})
}
