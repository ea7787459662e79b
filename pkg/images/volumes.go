package images

import (
	"context"
	"maps"
	"slices"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/pkg/cri"
)

// ContainerStatuser is what the image GC asks, when the runtime offers it,
// of each container it knows, once: its status, for the images it mounts
// as image volumes (the kubelet passes a pod's image volumes to
// CreateContainer as mounts, and CRI lists containers without them). A
// *cri.Client is one.
type ContainerStatuser interface {
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
}

var _ ContainerStatuser = (*cri.Client)(nil)

// volumeMounts remembers, per container, the images it mounts as image
// volumes: a container's mounts never change, so its status is read once.
type volumeMounts struct {
	// mu serialises refs whole, status reads included: calls that overlap
	// (a Plan during a run) would otherwise forget what the other read.
	mu          sync.Mutex
	byContainer map[string][]string
}

// refs returns the image references that the containers ids mount,
// reading the status of those not read before, and forgets the containers
// not in ids. A container gone meanwhile mounts nothing; any other failure
// is returned (what is in use cannot be told), and what was read before it
// stays remembered.
func (v *volumeMounts) refs(ctx context.Context, rt ContainerStatuser, ids []string) (map[string]bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.byContainer == nil {
		v.byContainer = map[string][]string{}
	}
	for _, id := range ids {
		if _, ok := v.byContainer[id]; ok {
			continue
		}
		st, err := rt.ContainerStatus(ctx, id)
		switch {
		case cri.IsNotFound(err):
			v.byContainer[id] = nil
		case err != nil:
			return nil, err
		default:
			var images []string
			for _, m := range st.GetMounts() {
				if ref := m.GetImage().GetImage(); ref != "" {
					images = append(images, ref)
				}
			}
			v.byContainer[id] = images
		}
	}
	known := make(map[string]bool, len(ids))
	for _, id := range ids {
		known[id] = true
	}
	refs := map[string]bool{}
	for id, images := range v.byContainer {
		if !known[id] {
			delete(v.byContainer, id)
			continue
		}
		for _, ref := range images {
			refs[ref] = true
		}
	}
	return refs, nil
}

// markVolumes marks in use the images a container the tracker knows, in
// any state, mounts as an image volume, and records them as used now: the
// kubelet's image GC holds them so, and dates their use at each of its
// checks. A mount names its image as the kubelet passes it (the image ID)
// or as another client wrote it: matched in every form (refForms), as the
// sandbox images are. Without a runtime that gives container statuses
// it marks nothing; with one, a container the runtime gave no ID of its
// own fails it (errSharedContainerIDs): its status cannot be asked for.
func (m *Manager) markVolumes(ctx context.Context, in []Image) error {
	rt, ok := m.opts.Runtime.(ContainerStatuser)
	if !ok {
		return nil
	}
	ids, err := m.tracker.containerIDs()
	if err != nil {
		return err
	}
	refs, err := m.volumes.refs(ctx, rt, ids)
	if err != nil {
		return err
	}
	forms := refForms(slices.Collect(maps.Keys(refs)))
	var used []string
	for i := range in {
		img := &in[i]
		if _, ok := namedBy(img, forms); ok {
			img.InUse = true
			used = append(used, img.ID)
		}
	}
	m.tracker.usedAt(used, m.clock.Now())
	return nil
}

// mountedByContainer says whether a container the tracker knows mounts img
// as an image volume (the check right before a removal).
func (m *Manager) mountedByContainer(ctx context.Context, img *Image) (bool, error) {
	one := []Image{*img}
	if err := m.markVolumes(ctx, one); err != nil {
		return false, err
	}
	return one[0].InUse, nil
}
