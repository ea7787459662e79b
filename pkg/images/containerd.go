package images

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unique"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/pkg/cri"
)

// DefaultSnapshotter is containerd's default snapshotter.
const DefaultSnapshotter = "overlayfs"

// ContainerdLayers reads, through containerd's own API on the runtime's
// socket, what storage each image holds: its content blobs (index,
// manifest, config, compressed layers; unless the content store is on
// another filesystem than the image filesystem) and its unpacked
// snapshots. Keys are "blob:<digest>" and "snapshot:<snapshotter>/<chain
// ID>", so images sharing a base layer share those keys and the planner
// counts them once.
//
// What an image is made of is immutable, so it is cached by image ID;
// Forget drops the entry of a removed image, Retain those of images gone
// otherwise. What of it the node holds is not: an image pulled without
// unpacking gets its snapshots later, pruned snapshots come back with the
// next pull, blobs go after an unpack (discard_unpacked_layers). So each
// entry also keeps every blob and snapshot the image may hold, and Layers
// checks them against which of them containerd has, as Held last read it
// (once per plan: two listings); an entry that no longer matches is read
// again. Each call to containerd ends by the runtime request timeout, as CRI
// calls do. Safe for concurrent use.
type ContainerdLayers struct {
	client      *containerd.Client
	snapshotter string
	timeout     time.Duration
	// blobsElsewhere: the content store is on another filesystem than the
	// image filesystem (the snapshotter's directory): removing a blob
	// frees nothing there, so blobs are not counted (BlobsElsewhere).
	blobsElsewhere string

	mu    sync.Mutex
	cache map[string]imageStorage
	// present is which blobs and snapshots of the k8s.io namespace
	// containerd had at the last read of Held (nil before one), which
	// Layers checks cached entries against.
	present *presence
	// roots maps the ID of each container record last listed to the
	// snapshot its root filesystem was made on (ContainerRecords): a
	// record's snapshot keeps its parent for its whole life, and a record
	// made again under the same ID is another (recordRoot.created).
	roots map[string]recordRoot
	// unserved are the records whose snapshotter containerd did not serve
	// at the last listing (ContainerRecords), each with when it was last
	// asked: logged once while it stays so, and asked again
	// unservedRecheck after.
	unserved map[string]time.Time
}

// unservedRecheck is how long a record whose snapshotter containerd did
// not serve counts as such before its snapshot is asked for again, and
// unservedStatTimeout how long a look at a snapshot on a snapshotter other
// than the image filesystem's may take (a proxy snapshotter's daemon that
// hangs): the check before each removal lists the records again.
const (
	unservedRecheck     = time.Minute
	unservedStatTimeout = 5 * time.Second
)

// imageStorage is what ContainerdLayers keeps of one image: the storage
// it holds, and the chain ID of its top layer (the snapshot a container's
// root filesystem is made on; "" for an image of no layers).
type imageStorage struct {
	layers []Layer
	top    string
	// may lists, as Layer keys, every blob (unless blobs do not count) and
	// snapshot the image may hold, present or not at the read; checked is
	// the presence read (presence.gen) it was last found to match (or
	// read after).
	may     []unique.Handle[string]
	checked uint64
}

// presence is which of the storage Layer keys name containerd had at one
// read: its snapshots of the snapshotter, its blobs (nil when blobs do not
// count). gen numbers the reads, from 1. Never changed once made.
type presence struct {
	gen   uint64
	snaps map[unique.Handle[string]]bool
	blobs map[unique.Handle[string]]bool
}

// has reports whether key was present at the read.
func (p *presence) has(key unique.Handle[string]) bool {
	return p.snaps[key] || p.blobs[key]
}

// matches reports whether st holds, of what it may, exactly what was
// present at p's read.
func (st *imageStorage) matches(p *presence) bool {
	held := make(map[unique.Handle[string]]bool, len(st.layers))
	for _, l := range st.layers {
		held[l.Key] = true
	}
	for _, k := range st.may {
		if held[k] != p.has(k) {
			return false
		}
	}
	return true
}

// recordRoot is the snapshot (key, of snapshotter) of a container
// record's root filesystem and the snapshot it was made on, and the
// record's creation and last update, which tell a record removed and made
// again under the same ID and snapshot key (`ctr run --rm img1 x`, then
// `ctr run img2 x`), or whose snapshot key was updated, from the one read.
type recordRoot struct {
	snapshotter, key, parent string
	created, updated         time.Time
}

// NewContainerdLayers connects to containerd at socketPath (the CRI socket)
// in the k8s.io namespace. imageFs is the image filesystem's mountpoint CRI
// ImageFsInfo reports, the snapshotter's directory in containerd's root: it
// names the snapshotter images are unpacked with (SnapshotterFromMountpoint;
// "" for the default), and says whether the content store beside it
// (ROOT/io.containerd.content.v1.content) is on the same filesystem. Each
// call ends after timeout (the runtime request timeout; 0: only by its
// context).
func NewContainerdLayers(ctx context.Context, socketPath, imageFs string, timeout time.Duration) (*ContainerdLayers, error) {
	c, err := containerdapi.Dial(ctx, socketPath, timeout)
	if err != nil {
		return nil, err
	}
	return &ContainerdLayers{client: c, snapshotter: SnapshotterFromMountpoint(imageFs), timeout: timeout,
		blobsElsewhere: contentElsewhere(imageFs), cache: map[string]imageStorage{}, roots: map[string]recordRoot{}}, nil
}

// contentStoreDir is the content store's directory in containerd's root.
const contentStoreDir = "io.containerd.content.v1.content"

// contentElsewhere says why the content store beside the snapshotter's
// directory imageFs is on another filesystem, "" when it is not or that
// cannot be told (either path cannot be read: then blobs count, as where
// both share containerd's root).
func contentElsewhere(imageFs string) string {
	if imageFs == "" {
		return ""
	}
	content := filepath.Join(filepath.Dir(imageFs), contentStoreDir)
	snap, err := filesystemOf(imageFs)
	if err != nil {
		return ""
	}
	blobs, err := filesystemOf(content)
	if err != nil || snap == blobs {
		return ""
	}
	return fmt.Sprintf("the content store %s is on another filesystem (%s) than the image filesystem %s (%s): removing an image frees its blobs there, so only its snapshots count",
		content, blobs, imageFs, snap)
}

// filesystemOf names the filesystem holding path (filesystemName of the
// mount that holds it).
func filesystemOf(path string) (string, error) {
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	// mountinfo.ParentsFilter compares plain prefixes (a mount at /data/c
	// would hold /data/containerd): a mount point holds p only up to a /.
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		holds := m.Mountpoint == "/" || p == m.Mountpoint || strings.HasPrefix(p, m.Mountpoint+"/")
		return !holds, false
	})
	if err != nil {
		return "", err
	}
	var holder *mountinfo.Info
	for _, m := range mounts {
		// The deepest mount point holds the path; of mounts stacked on
		// one point, the last one listed is the one seen.
		if holder == nil || len(m.Mountpoint) >= len(holder.Mountpoint) {
			holder = m
		}
	}
	if holder == nil {
		return "", fmt.Errorf("no mount holds %s", p)
	}
	return filesystemName(holder), nil
}

// filesystemName names the space a mount's files take their bytes from: the
// device the mount table gives, one per filesystem (stat(2) gives each
// btrfs subvolume a device of its own, though they share one filesystem;
// bind mounts of one filesystem share its device), or, for ZFS, whose
// datasets each have a device but share their pool's free space, the pool
// (the dataset's name up to its first /: containerd's ZFS snapshotter needs
// a dataset of its own, its content store stays in another one).
func filesystemName(m *mountinfo.Info) string {
	if m.FSType == "zfs" {
		pool, _, _ := strings.Cut(m.Source, "/")
		return "zfs pool " + pool
	}
	return fmt.Sprintf("device %d:%d", m.Major, m.Minor)
}

// BlobsElsewhere says why content blobs are not counted (the content store
// is on another filesystem than the image filesystem), "" when they are.
func (c *ContainerdLayers) BlobsElsewhere() string { return c.blobsElsewhere }

// Close closes the connection.
func (c *ContainerdLayers) Close() error { return c.client.Close() }

// SnapshotterFromMountpoint derives the snapshotter from the image
// filesystem mountpoint CRI reports, e.g.
// /var/lib/containerd/io.containerd.snapshotter.v1.overlayfs → overlayfs.
func SnapshotterFromMountpoint(mountpoint string) string {
	if name, ok := strings.CutPrefix(filepath.Base(mountpoint), "io.containerd.snapshotter.v1."); ok && name != "" {
		return name
	}
	return DefaultSnapshotter
}

// writeTopics are the topics of containerd's events that follow a write to
// its storage: a blob stored in the content store (containerd 1.7 and
// later), a layer unpacked into a snapshot, an image record made or
// changed. Of every namespace: another namespace's pull (docker's moby,
// nerdctl's default) fills the same disk.
var writeTopics = []string{
	`topic=="/content/create"`,
	`topic=="/snapshot/commit"`,
	`topic=="/images/create"`,
	`topic=="/images/update"`,
}

// WatchWrites follows containerd's event stream for writes to its storage
// (writeTopics), calling wrote once per event, until ctx ends (nil) or
// the stream breaks (its error). opened is called once the subscription
// was sent; containerd confirms none, so events of the next moments may
// still be missed.
func (c *ContainerdLayers) WatchWrites(ctx context.Context, opened, wrote func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, errs := c.client.EventService().Subscribe(ctx, writeTopics...)
	select {
	case err := <-errs: // the subscription was refused
		if ctx.Err() != nil {
			return nil
		}
		return err
	default:
	}
	opened()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-events:
			wrote()
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("containerd ended the event stream")
			}
			return err
		}
	}
}

// Layers returns the storage img holds. img.ID is the CRI image ID (the
// config digest), which the CRI plugin also records as an image name.
func (c *ContainerdLayers) Layers(ctx context.Context, img *Image) ([]Layer, error) {
	st, err := c.storage(ctx, img)
	return st.layers, err
}

// TopLayer returns the chain ID of img's top layer for this platform: the
// snapshot a container's root filesystem is made on ("" for an image of no
// layers). It is read with the image's layers, and cached with them.
func (c *ContainerdLayers) TopLayer(ctx context.Context, img *Image) (string, error) {
	st, err := c.storage(ctx, img)
	return st.top, err
}

// storage returns what img holds: from the cache while what it holds
// matches what the last presence read found, else read.
func (c *ContainerdLayers) storage(ctx context.Context, img *Image) (imageStorage, error) {
	c.mu.Lock()
	cached, ok := c.cache[img.ID]
	present := c.present
	c.mu.Unlock()
	switch {
	case ok && (present == nil || cached.checked >= present.gen):
		return cached, nil
	case ok && cached.matches(present):
		cached.checked = present.gen
		c.mu.Lock()
		if e, still := c.cache[img.ID]; still && e.checked < present.gen {
			c.cache[img.ID] = cached
		}
		c.mu.Unlock()
		return cached, nil
	}
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	target, err := c.target(ctx, img)
	if err != nil {
		return imageStorage{}, imageOwn(ctx, err)
	}
	st, err := c.read(ctx, target)
	if err != nil {
		return imageStorage{}, imageOwn(ctx, fmt.Errorf("layers of image %s: %w", img.ID, err))
	}
	if present != nil {
		st.checked = present.gen // read after it
	}
	c.mu.Lock()
	c.cache[img.ID] = st
	c.mu.Unlock()
	return st, nil
}

// imageOwn marks err, of a read of one image's storage, as the image's own
// (ErrImageUnreadable: a blob or record not found, content that does not
// decode) unless it says that containerd could not be asked: its
// connection failed, or the call timed out or was cancelled (ctx, the
// call's, ended), which says nothing of the image.
func imageOwn(ctx context.Context, err error) error {
	if ctx.Err() != nil || errdefs.IsUnavailable(err) || errdefs.IsDeadlineExceeded(err) || errdefs.IsCanceled(err) || cri.IsUnavailable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrImageUnreadable, err)
}

// Forget drops the cached layers of an image (after its removal).
func (c *ContainerdLayers) Forget(imageID string) {
	c.mu.Lock()
	delete(c.cache, imageID)
	c.mu.Unlock()
}

// Retain drops the cached layers of every image but those listed (by ID):
// images the kubelet or an operator removed leave no entry behind.
func (c *ContainerdLayers) Retain(imageIDs map[string]bool) {
	c.mu.Lock()
	maps.DeleteFunc(c.cache, func(id string, _ imageStorage) bool { return !imageIDs[id] })
	c.mu.Unlock()
}

// SandboxImages returns the image names of the pod sandboxes containerd
// holds, in any state: the containerd container record the CRI plugin
// makes for each sandbox (its pause container, labelled
// io.cri-containerd.kind=sandbox) names the image its root filesystem was
// made from. CRI lists no sandbox's image, and containerd 2.x neither
// reports its configured sandbox image nor pins it unless the image was
// pulled under exactly the name configured. One listing.
func (c *ContainerdLayers) SandboxImages(ctx context.Context) ([]string, error) {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	recs, err := c.client.ContainerService().List(ctx, `labels."`+criKindLabel+`"==`+criKindSandbox)
	if err != nil {
		return nil, fmt.Errorf("listing containerd's sandbox containers: %w", err)
	}
	var names []string
	for _, r := range recs {
		if r.Image != "" && !slices.Contains(names, r.Image) {
			names = append(names, r.Image)
		}
	}
	return names, nil
}

// ContainerRecords lists containerd's container records of the k8s.io
// namespace, but those of the CRI plugin's pod sandboxes (SandboxImages):
// the CRI plugin's containers, also one it failed to load at its start,
// which CRI does not list, and those made through containerd's own API in
// that namespace (`ctr -n k8s.io run`, nerdctl --namespace k8s.io,
// buildkit's containerd worker), which CRI never lists. It gives the image
// each names, and the snapshot each one's root filesystem was made on (the
// parent of its snapshot: the chain ID of its image's top layer, as
// TopLayer gives it), which still tells the image when the name a record
// gives moved to another image since. One listing, and a look at the
// snapshot of each record not seen before (by ID, snapshot key, creation
// and last update: a record made again under the same ID is read again).
//
// A record of the CRI plugin also gives, in its metadata, the ID of the
// image it was made from (criImageRef), which Images lists too: that
// keeps the image whatever its name and snapshot say.
//
// A record made on a snapshotter containerd does not serve (a proxy
// snapshotter whose daemon is down, hangs or was removed, such as nydus,
// stargz or soci; devmapper that failed to load at containerd's start)
// cannot be asked what its root filesystem was made on: while containerd
// itself answers, that record's root is left unread, logged once while it
// stays so and asked again unservedRecheck later, and it keeps the image it
// names and, a CRI plugin's record, the image it was made from, by ID;
// another's whose name moved keeps nothing more. One such record does not
// stop the image GC of the node; a failure of the image filesystem's own
// snapshotter does.
func (c *ContainerdLayers) ContainerRecords(ctx context.Context) (ContainerRecords, error) {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	recs, err := c.client.ContainerService().List(ctx)
	if err != nil {
		return ContainerRecords{}, fmt.Errorf("listing containerd's containers: %w", err)
	}
	c.mu.Lock()
	known, asked := maps.Clone(c.roots), maps.Clone(c.unserved)
	c.mu.Unlock()
	now := time.Now()
	out := ContainerRecords{Layers: map[string]bool{}}
	roots := make(map[string]recordRoot, len(recs))
	unserved := map[string]time.Time{}
	answers := false // containerd answered since the listing
	for _, r := range recs {
		if r.Labels[criKindLabel] == criKindSandbox {
			continue
		}
		for _, name := range []string{r.Image, criImageRef(r)} {
			if name != "" && !slices.Contains(out.Images, name) {
				out.Images = append(out.Images, name)
			}
		}
		if r.SnapshotKey == "" {
			continue
		}
		sn := cmp.Or(r.Snapshotter, c.snapshotter)
		if at, ok := asked[r.ID]; ok && sn != c.snapshotter && now.Sub(at) < unservedRecheck {
			unserved[r.ID] = at
			continue
		}
		root, ok := known[r.ID]
		if !ok || root.snapshotter != sn || root.key != r.SnapshotKey || !root.created.Equal(r.CreatedAt) || !root.updated.Equal(r.UpdatedAt) {
			info, err := c.statSnapshot(ctx, sn, r.SnapshotKey)
			switch {
			case errdefs.IsNotFound(err):
				continue // removed with its container, or never made
			case err != nil && sn != c.snapshotter && ctx.Err() == nil:
				// The record's own snapshotter, if containerd answers.
				if !answers {
					if _, verr := c.client.Version(ctx); verr != nil {
						return ContainerRecords{}, fmt.Errorf("the snapshot of containerd's container %s: %w", r.ID, err)
					}
					answers = true
				}
				if _, ok := asked[r.ID]; !ok {
					klog.FromContext(ctx).Info("Warning: containerd cannot read the snapshot of a container record on another snapshotter; that record keeps the image it names, and the one the CRI plugin made it from, only",
						"container", r.ID, "snapshotter", sn, "image", r.Image, "imageRef", criImageRef(r), "err", err)
				}
				unserved[r.ID] = now
				continue
			case err != nil:
				return ContainerRecords{}, fmt.Errorf("the snapshot of containerd's container %s: %w", r.ID, err)
			}
			root = recordRoot{snapshotter: sn, key: r.SnapshotKey, parent: info.Parent, created: r.CreatedAt, updated: r.UpdatedAt}
		}
		roots[r.ID] = root
		if root.parent != "" {
			out.Layers[root.parent] = true
		}
	}
	c.mu.Lock()
	c.roots, c.unserved = roots, unserved
	c.mu.Unlock()
	return out, nil
}

// statSnapshot looks at the snapshot key of snapshotter sn: within
// unservedStatTimeout when sn is not the image filesystem's.
func (c *ContainerdLayers) statSnapshot(ctx context.Context, sn, key string) (snapshots.Info, error) {
	if sn != c.snapshotter {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, unservedStatTimeout)
		defer cancel()
	}
	return c.client.SnapshotService(sn).Stat(ctx, key)
}

// criImageRef returns the ID of the image a container record of the CRI
// plugin was made from, as its metadata (criMetadataExtension) gives it;
// "" for another record, or metadata that does not parse.
func criImageRef(r containers.Container) string {
	ext, ok := r.Extensions[criMetadataExtension]
	if !ok || ext == nil {
		return ""
	}
	var md struct {
		Version  string
		Metadata struct{ ImageRef string }
	}
	if err := json.Unmarshal(ext.GetValue(), &md); err != nil || md.Version != "v1" {
		return ""
	}
	return md.Metadata.ImageRef
}

// The label the CRI plugin gives its container records, and its value for
// a pod sandbox's.
const (
	criKindLabel   = "io.cri-containerd.kind"
	criKindSandbox = "sandbox"
	// criMetadataExtension is the extension of a container record in
	// which the CRI plugin keeps its metadata (JSON: {"Version": "v1",
	// "Metadata": {..., "ImageRef": IMAGE ID}}), in containerd 1.6 to 2.x.
	criMetadataExtension = "io.cri-containerd.container.metadata"
)

// Arrivals returns, for each of the images given (by CRI image ID), when it
// arrived on the node as far as containerd knows: the creation time of its
// image record named by the ID (which the CRI plugin makes at every pull,
// and which goes when the image is removed), else the earliest of the
// records named by its tags and digests. An image with no record is left
// out. One listing of containerd's image store; for one image (the check
// right before a removal), a lookup of its records by name instead, the
// ID's first.
func (c *ContainerdLayers) Arrivals(ctx context.Context, imgs []*runtimeapi.Image) (map[string]time.Time, error) {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	created := c.recordCreated
	if len(imgs) != 1 {
		records, err := c.client.ImageService().List(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing containerd's images: %w", err)
		}
		listed := make(map[string]time.Time, len(records))
		for _, r := range records {
			listed[r.Name] = r.CreatedAt
		}
		created = func(_ context.Context, name string) (time.Time, error) { return listed[name], nil }
	}
	out := make(map[string]time.Time, len(imgs))
	for _, img := range imgs {
		at, err := arrival(ctx, img, created)
		if err != nil {
			return nil, err
		}
		if !at.IsZero() {
			out[img.GetId()] = at
		}
	}
	return out, nil
}

// recordCreated returns the creation time of containerd's image record
// name, or the zero time when there is none.
func (c *ContainerdLayers) recordCreated(ctx context.Context, name string) (time.Time, error) {
	r, err := c.client.ImageService().Get(ctx, name)
	switch {
	case errdefs.IsNotFound(err):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("reading containerd's image %s: %w", name, err)
	}
	return r.CreatedAt, nil
}

// arrival is when img arrived by the creation times of its records
// (created; zero for none): its ID's record's, else the earliest of its
// names'. Zero when no record has a time.
func arrival(ctx context.Context, img *runtimeapi.Image, created func(context.Context, string) (time.Time, error)) (time.Time, error) {
	at, err := created(ctx, img.GetId())
	if err != nil || !at.IsZero() {
		return at, err
	}
	var earliest time.Time
	for _, names := range [][]string{img.GetRepoTags(), img.GetRepoDigests()} {
		for _, n := range names {
			at, err := created(ctx, n)
			if err != nil {
				return time.Time{}, err
			}
			if !at.IsZero() && (earliest.IsZero() || at.Before(earliest)) {
				earliest = at
			}
		}
	}
	return earliest, nil
}

// Held returns the storage keys (as Layer.Key) that removing images of the
// k8s.io namespace cannot free, because something else holds them:
//   - the blobs of images in containerd's other namespaces (`ctr`,
//     nerdctl, buildkit): containerd keeps one copy of a blob for every
//     namespace that has it;
//   - the blobs and snapshots a lease holds, in any namespace (a pull or
//     an unpack under way), with the snapshots under them;
//   - the snapshots under the k8s.io namespace's active snapshots (a
//     container's root filesystem, also of a container CRI does not list).
//
// A few listings per call, and a walk of each other namespace's image.
func (c *ContainerdLayers) Held(ctx context.Context) (map[unique.Handle[string]]bool, error) {
	ctx, cancel := containerdapi.WithTimeout(ctx, c.timeout)
	defer cancel()
	held := map[unique.Handle[string]]bool{}
	blob := func(d string) { held[unique.Make("blob:"+d)] = true }

	// The snapshots of the k8s.io namespace, each with its parent.
	parent := map[string]string{}
	var active []string
	snaps := map[unique.Handle[string]]bool{}
	err := c.client.SnapshotService(c.snapshotter).Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		parent[info.Name] = info.Parent
		if info.Kind != snapshots.KindCommitted {
			active = append(active, info.Name)
		} else {
			snaps[unique.Make("snapshot:"+c.snapshotter+"/"+info.Name)] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing containerd's %s snapshots: %w", c.snapshotter, err)
	}
	if err := c.notePresence(ctx, snaps); err != nil {
		// What others hold is still known: only the check of the cached
		// images' storage waits for the next read (the cache is used as
		// the last presence read left it).
		klog.FromContext(ctx).V(2).Info("Cannot list containerd's content; the cached layers of images are not checked against it this time", "err", err)
	}
	under := func(name string) {
		for ; name != ""; name = parent[name] {
			k := unique.Make("snapshot:" + c.snapshotter + "/" + name)
			if held[k] {
				return
			}
			held[k] = true
		}
	}
	for _, name := range active {
		under(parent[name])
	}

	nss, err := c.client.NamespaceService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing containerd's namespaces: %w", err)
	}
	cs, ls := c.client.ContentStore(), c.client.LeasesService()
	// Every blob of an image that its namespace has, of every platform.
	record := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		switch _, err := cs.Info(ctx, desc.Digest); {
		case err == nil:
			blob(desc.Digest.String())
		case !errdefs.IsNotFound(err):
			return nil, err
		}
		return nil, nil
	})
	walk := images.Handlers(record, presentChildren(cs))
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		all, err := ls.List(nctx)
		if err != nil {
			return nil, fmt.Errorf("listing containerd's leases in namespace %s: %w", ns, err)
		}
		for _, l := range all {
			res, err := ls.ListResources(nctx, l)
			if err != nil {
				return nil, fmt.Errorf("listing what lease %s holds in namespace %s: %w", l.ID, ns, err)
			}
			for _, r := range res {
				switch {
				case r.Type == "content":
					blob(r.ID)
				case r.Type == "snapshots/"+c.snapshotter && ns == containerdapi.Namespace:
					under(r.ID)
				}
			}
		}
		if ns == containerdapi.Namespace {
			continue
		}
		imgs, err := c.client.ImageService().List(nctx)
		if err != nil {
			return nil, fmt.Errorf("listing containerd's images in namespace %s: %w", ns, err)
		}
		for _, img := range imgs {
			if err := images.Walk(nctx, walk, img.Target); err != nil {
				return nil, fmt.Errorf("reading image %s in containerd namespace %s: %w", img.Name, ns, err)
			}
		}
	}
	return held, nil
}

// notePresence records, for Layers to check its cache against, the
// committed snapshots snaps (as Layer keys) and the blobs of the k8s.io
// namespace (one listing, unless blobs do not count).
func (c *ContainerdLayers) notePresence(ctx context.Context, snaps map[unique.Handle[string]]bool) error {
	var blobs map[unique.Handle[string]]bool
	if c.blobsElsewhere == "" {
		blobs = map[unique.Handle[string]]bool{}
		err := c.client.ContentStore().Walk(ctx, func(info content.Info) error {
			blobs[unique.Make("blob:"+info.Digest.String())] = true
			return nil
		})
		if err != nil {
			return fmt.Errorf("listing containerd's content: %w", err)
		}
	}
	c.mu.Lock()
	gen := uint64(1)
	if c.present != nil {
		gen = c.present.gen + 1
	}
	c.present = &presence{gen: gen, snaps: snaps, blobs: blobs}
	c.mu.Unlock()
	return nil
}

// presentChildren is images.ChildrenHandler for content that may be
// partly absent (another platform's manifests, layers discarded after
// unpack): a blob the store lacks has no children to read.
func presentChildren(cs content.Store) images.HandlerFunc {
	children := images.ChildrenHandler(cs)
	return func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		out, err := children(ctx, desc)
		if errdefs.IsNotFound(err) {
			return nil, nil
		}
		return out, err
	}
}

func (c *ContainerdLayers) target(ctx context.Context, img *Image) (ocispec.Descriptor, error) {
	store := c.client.ImageService()
	names := append([]string{img.ID}, img.RepoTags...)
	names = append(names, img.RepoDigests...)
	for _, name := range names {
		ci, err := store.Get(ctx, name)
		if err == nil {
			return ci.Target, nil
		}
		if !errdefs.IsNotFound(err) {
			return ocispec.Descriptor{}, fmt.Errorf("looking up image %s in containerd: %w", name, err)
		}
	}
	return ocispec.Descriptor{}, fmt.Errorf("image %s: %w in containerd namespace %s", img.ID, errdefs.ErrNotFound, containerdapi.Namespace)
}

func (c *ContainerdLayers) read(ctx context.Context, target ocispec.Descriptor) (imageStorage, error) {
	cs := c.client.ContentStore()
	var (
		layers []Layer
		config *ocispec.Descriptor
	)
	// Every blob reachable from the target for this platform: the index,
	// the platform's manifest, its config and its layers.
	var may []unique.Handle[string]
	handler := images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		if c.blobsElsewhere == "" {
			may = append(may, unique.Make("blob:"+desc.Digest.String()))
		}
		if c.blobsElsewhere != "" {
			// Frees nothing on the image filesystem.
		} else if info, err := cs.Info(ctx, desc.Digest); errdefs.IsNotFound(err) {
			// Not fetched (another platform, or discarded after unpack).
		} else if err != nil {
			return nil, fmt.Errorf("content %s: %w", desc.Digest, err)
		} else {
			layers = append(layers, Layer{Key: unique.Make("blob:" + desc.Digest.String()), Size: uint64(info.Size)})
		}
		if images.IsConfigType(desc.MediaType) {
			d := desc
			config = &d
		}
		return nil, nil
	})
	children := images.LimitManifests(images.FilterPlatforms(images.ChildrenHandler(cs), platforms.Default()), platforms.Default(), 1)
	if err := images.Walk(ctx, images.Handlers(handler, children), target); err != nil {
		return imageStorage{}, err
	}
	if config == nil {
		return imageStorage{}, errors.New("no image config found for this platform")
	}
	diffIDs, err := images.RootFS(ctx, cs, *config)
	if err != nil {
		return imageStorage{}, fmt.Errorf("reading rootfs of config %s: %w", config.Digest, err)
	}
	sn := c.client.SnapshotService(c.snapshotter)
	// ChainIDs writes each layer's chain ID in place: the last is the top
	// layer's.
	chainIDs := identity.ChainIDs(diffIDs)
	for _, chainID := range chainIDs {
		may = append(may, unique.Make("snapshot:"+c.snapshotter+"/"+chainID.String()))
		usage, err := sn.Usage(ctx, chainID.String())
		if errdefs.IsNotFound(err) {
			continue // not unpacked with this snapshotter
		}
		if err != nil {
			return imageStorage{}, fmt.Errorf("snapshot %s: %w", chainID, err)
		}
		layers = append(layers, Layer{Key: unique.Make("snapshot:" + c.snapshotter + "/" + chainID.String()), Size: uint64(usage.Size)})
	}
	st := imageStorage{layers: layers, may: may}
	if len(chainIDs) > 0 {
		st.top = chainIDs[len(chainIDs)-1].String()
	}
	return st, nil
}
