package ownergc

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"
)

// discoverySnapshot is what one discovery round found. It is replaced
// whole, never mutated.
type discoverySnapshot struct {
	mapper meta.RESTMapper
	// mappings caches mapping's answers (mappingKey → mappingResult): a
	// REST mapper's lookup allocates and costs more than a map read, and
	// every write asks.
	mappings sync.Map
}

type mappingKey struct{ apiVersion, kind string }

type mappingResult struct {
	m   *meta.RESTMapping
	err error
}

// minKickInterval is the least time between the starts of two discovery
// rounds asked for by kick (finalizer holds): however many foreground
// deletions finish, discovery costs at most a round a second.
const minKickInterval = time.Second

// discoveryLoop refreshes discovery at once and then every period (sooner
// while it has never succeeded, or when kicked) until ctx ends.
func (r *run) discoveryLoop(ctx context.Context) {
	retry := time.Second
	for {
		begin := r.c.clock.Now()
		wait := r.c.period
		if err := r.syncResources(ctx); err != nil && !r.discovered.Load() {
			wait = min(retry, r.c.period)
			retry *= 2
		}
		t := r.c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-r.kick:
			t.Stop()
			if !r.sleep(ctx, minKickInterval-r.c.clock.Since(begin)) {
				return
			}
		}
	}
}

// sleep waits d on the collector's clock; false if ctx ended first.
func (r *run) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := r.c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// syncResources runs one discovery round: it replaces the REST mapper and
// starts and stops monitors so that exactly the deletable resources are
// watched. Resources of groups that failed discovery keep their monitors,
// also when another version of the resource is served: a resource has one
// monitor (see monitorSet).
func (r *run) syncResources(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.c.requestTimeout)
	defer cancel()
	round := r.roundsStarted.Add(1)
	groups, failed, err := discoverGroups(ctx, r.c.discovery)
	if err != nil {
		r.c.metrics.discoveryErrors.Inc()
		r.logger.Error(err, "API discovery failed", "failedGroups", len(failed))
		if len(groups) == 0 {
			r.roundFailed.Store(round)
			return err
		}
	}
	resources := deletableResources(groups, r.c.ignored)
	undiscovered, lastRead := r.c.gvs.learn(groups, failed, r.c.ignored)
	// The mapper keeps what a failed group version served when last read,
	// as its monitor is kept: writes to the objects it delivers find
	// their resource.
	r.snapshot.Store(&discoverySnapshot{mapper: restmapper.NewDiscoveryRESTMapper(withLastRead(groups, lastRead))})
	keep := func(gvr schema.GroupVersionResource) bool {
		_, ok := failed[gvr.GroupVersion()]
		return ok
	}
	listed := listedResources(groups)
	added, removed := r.monitors.sync(resources, keep, func(gr schema.GroupResource) bool { return listed[gr] })
	r.undiscovered.Store(&undiscovered)
	r.unread.Store(int64(len(failed) - len(lastRead)))
	r.roundDone.Store(round)
	r.discovered.Store(true)
	if added+removed > 0 {
		r.logger.Info("Resource monitors changed", "added", added, "removed", removed, "monitors", r.monitors.len())
	}
	r.unpark()
	return err
}

// discoverGroups reads every group, version and resource the API server
// serves. On a partial failure it returns what it could read, the failed
// group versions and the error.
func discoverGroups(ctx context.Context, dc discovery.DiscoveryInterfaceWithContext) ([]*restmapper.APIGroupResources, map[schema.GroupVersion]error, error) {
	gs, rs, err := dc.ServerGroupsAndResourcesWithContext(ctx)
	failed, partial := discovery.GroupDiscoveryFailedErrorGroups(err)
	if err != nil && !partial {
		return nil, nil, fmt.Errorf("discover API resources: %w", err)
	}
	if err != nil {
		err = fmt.Errorf("discover API resources: %w", err)
	}
	byGV := map[string]*metav1.APIResourceList{}
	for _, l := range rs {
		byGV[l.GroupVersion] = l
	}
	var groups []*restmapper.APIGroupResources
	for _, g := range gs {
		gr := &restmapper.APIGroupResources{Group: *g, VersionedResources: map[string][]metav1.APIResource{}}
		for _, v := range g.Versions {
			if l, ok := byGV[v.GroupVersion]; ok {
				gr.VersionedResources[v.Version] = l.APIResources
			}
		}
		groups = append(groups, gr)
	}
	if len(groups) == 0 && err == nil {
		err = errors.New("discover API resources: the API server reported no groups")
	}
	return groups, failed, err
}

// deletableResources picks, for every group and resource, the first version
// in preference order that serves it with the list, watch and delete verbs,
// minus the ignored resources and subresources (as upstream's
// GetDeletableResources).
func deletableResources(groups []*restmapper.APIGroupResources, ignored map[schema.GroupResource]struct{}) map[schema.GroupResource]*resource {
	out := map[schema.GroupResource]*resource{}
	for _, g := range groups {
		versions := []string{g.Group.PreferredVersion.Version}
		for _, v := range g.Group.Versions {
			if v.Version != g.Group.PreferredVersion.Version {
				versions = append(versions, v.Version)
			}
		}
		for _, v := range versions {
			for _, ar := range g.VersionedResources[v] {
				gr := schema.GroupResource{Group: g.Group.Name, Resource: ar.Name}
				if !monitorable(gr, ar.Verbs, ignored) || out[gr] != nil {
					continue
				}
				out[gr] = newResource(gr.WithVersion(v), ar.Kind, ar.Namespaced)
			}
		}
	}
	return out
}

// listedResources returns the resources (no subresource) that discovery
// lists with the get verb at some version: the objects of one that is not
// monitorable can still be read, and the graph keeps them (see
// monitorSet.sync).
func listedResources(groups []*restmapper.APIGroupResources) map[schema.GroupResource]bool {
	out := map[schema.GroupResource]bool{}
	for _, g := range groups {
		for _, rs := range g.VersionedResources {
			for _, ar := range rs {
				if !strings.Contains(ar.Name, "/") && hasVerbs(ar.Verbs, "get") {
					out[schema.GroupResource{Group: g.Group.Name, Resource: ar.Name}] = true
				}
			}
		}
	}
	return out
}

// monitorable reports whether the collector monitors resource gr (at some
// version) when discovery lists it with verbs: list, watch and delete, no
// subresource, not ignored.
func monitorable(gr schema.GroupResource, verbs metav1.Verbs, ignored map[schema.GroupResource]struct{}) bool {
	_, skip := ignored[gr]
	return !skip && !strings.Contains(gr.Resource, "/") && hasVerbs(verbs, "list", "watch", "delete")
}

// groupVersions remembers the resources of each group version discovery
// read in this process (across Runs), as of its last successful read. A
// group version that fails discovery holds owners' orphan and
// foregroundDeletion finalizers only if it then served a resource the
// collector monitors, or if this process never read it: holding for one
// that served nothing to monitor (metrics.k8s.io: get and list only)
// protects nothing, and one never read may serve anything. And its
// resources stay in the REST mapper while it fails (withLastRead). mu
// guards it: each Run's discovery loop uses it in turn.
type groupVersions struct {
	mu       sync.Mutex
	lastRead map[schema.GroupVersion][]metav1.APIResource
}

// learn records what each group version a round read serves, forgets the
// group versions the API server no longer names (one that comes back is
// unknown again), and returns the failed group versions that hold
// finalizers (sorted) and the last read resources of the failed ones this
// process read before.
func (gvs *groupVersions) learn(groups []*restmapper.APIGroupResources, failed map[schema.GroupVersion]error,
	ignored map[schema.GroupResource]struct{}) (holding []string, lastRead map[schema.GroupVersion][]metav1.APIResource) {
	gvs.mu.Lock()
	defer gvs.mu.Unlock()
	if gvs.lastRead == nil {
		gvs.lastRead = map[schema.GroupVersion][]metav1.APIResource{}
	}
	named := map[schema.GroupVersion]bool{}
	for gv := range failed {
		named[gv] = true
	}
	for _, g := range groups {
		for _, v := range g.Group.Versions {
			named[schema.GroupVersion{Group: g.Group.Name, Version: v.Version}] = true
		}
		for v, rs := range g.VersionedResources {
			gv := schema.GroupVersion{Group: g.Group.Name, Version: v}
			if _, ok := failed[gv]; ok {
				continue
			}
			named[gv] = true
			gvs.lastRead[gv] = rs
		}
	}
	maps.DeleteFunc(gvs.lastRead, func(gv schema.GroupVersion, _ []metav1.APIResource) bool { return !named[gv] })
	holding = make([]string, 0, len(failed))
	for gv := range failed {
		rs, known := gvs.lastRead[gv]
		if known {
			if lastRead == nil {
				lastRead = map[schema.GroupVersion][]metav1.APIResource{}
			}
			lastRead[gv] = rs
		}
		if !known || slices.ContainsFunc(rs, func(ar metav1.APIResource) bool {
			return monitorable(schema.GroupResource{Group: gv.Group, Resource: ar.Name}, ar.Verbs, ignored)
		}) {
			holding = append(holding, gv.String())
		}
	}
	slices.Sort(holding)
	return holding, lastRead
}

// withLastRead returns groups with the group versions of lastRead added as
// lastRead has them (groups itself is not changed). A failed group version
// may still be among its group's versions (read without aggregated
// discovery), or not (aggregated discovery leaves a stale one out, and a
// group left without versions may be left out).
func withLastRead(groups []*restmapper.APIGroupResources, lastRead map[schema.GroupVersion][]metav1.APIResource) []*restmapper.APIGroupResources {
	if len(lastRead) == 0 {
		return groups
	}
	out := make([]*restmapper.APIGroupResources, 0, len(groups))
	byName := map[string]*restmapper.APIGroupResources{}
	for _, g := range groups {
		c := &restmapper.APIGroupResources{Group: g.Group, VersionedResources: maps.Clone(g.VersionedResources)}
		c.Group.Versions = slices.Clone(g.Group.Versions)
		if c.VersionedResources == nil {
			c.VersionedResources = map[string][]metav1.APIResource{}
		}
		out = append(out, c)
		byName[g.Group.Name] = c
	}
	for _, gv := range slices.SortedFunc(maps.Keys(lastRead), func(a, b schema.GroupVersion) int { return strings.Compare(a.String(), b.String()) }) {
		g := byName[gv.Group]
		if g == nil {
			g = &restmapper.APIGroupResources{Group: metav1.APIGroup{Name: gv.Group}, VersionedResources: map[string][]metav1.APIResource{}}
			out = append(out, g)
			byName[gv.Group] = g
		}
		g.VersionedResources[gv.Version] = lastRead[gv]
		if !slices.ContainsFunc(g.Group.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == gv.Version }) {
			g.Group.Versions = append(g.Group.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version})
		}
	}
	return out
}

func hasVerbs(have metav1.Verbs, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}
