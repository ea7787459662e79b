package images

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unique"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/config"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

const mib = 1 << 20

func policyFor(t *testing.T, mutate func(*config.ImageGCConfiguration)) *Policy {
	t.Helper()
	c := config.Defaulted().ImageGC
	if mutate != nil {
		mutate(&c)
	}
	return NewPolicy(c)
}

// img builds an image first seen `seen` before t0 and last used `used`
// before t0 (negative: never used).
func img(id string, sizeMiB uint64, seen, used time.Duration) Image {
	i := Image{ID: id, RepoTags: []string{"registry.local/" + id + ":v1"}, Size: sizeMiB * mib, FirstDetected: t0.Add(-seen)}
	if used >= 0 {
		i.LastUsed = t0.Add(-used)
	}
	return i
}

func with(i Image, f func(*Image)) Image { f(&i); return i }

// summary renders a plan as "id:reason" lists for comparison.
type summary struct {
	Remove, Spare, Keep []string
	BytesToFree         uint64
}

func summarize(p *Plan) summary {
	var s summary
	for _, d := range p.Remove {
		s.Remove = append(s.Remove, d.Image.ID+":"+d.Reason)
	}
	for _, d := range p.Spare {
		s.Spare = append(s.Spare, d.Image.ID)
	}
	for _, d := range p.Keep {
		s.Keep = append(s.Keep, d.Image.ID+":"+d.Reason)
	}
	s.BytesToFree = p.BytesToFree
	return s
}

// TestPlanKubeletParity checks the plan against kubelet's image GC rules,
// point by point: thresholds and bytes to free, LRU order with the
// first-detected tie-break, minimum age, maximum age, pinned, sandbox, and
// images used by running and by exited containers.
func TestPlanKubeletParity(t *testing.T) {
	const capacity = 1000 * mib
	cases := map[string]struct {
		mutate func(*config.ImageGCConfiguration)
		images []Image
		disk   DiskStats
		want   summary
	}{
		"below the high threshold nothing is removed": {
			images: []Image{img("a", 100, time.Hour, time.Hour)},
			disk:   DiskStats{Capacity: capacity, Available: 160 * mib}, // 84%
			want:   summary{Spare: []string{"a"}},
		},
		"at the high threshold frees down to the low one": {
			// 85% used: free capacity*20% - available = 200-150 = 50 MiB.
			images: []Image{img("a", 30, time.Hour, time.Hour), img("b", 30, time.Hour, 2*time.Hour), img("c", 30, time.Hour, 3*time.Hour)},
			disk:   DiskStats{Capacity: capacity, Available: 150 * mib},
			want:   summary{Remove: []string{"c:space", "b:space"}, Spare: []string{"a"}, BytesToFree: 50 * mib},
		},
		"least recently used first; never used before used": {
			images: []Image{
				img("used-recently", 10, 5*time.Hour, time.Minute),
				img("used-long-ago", 10, 5*time.Hour, 4*time.Hour),
				img("never-used", 10, time.Hour, -1),
			},
			disk: DiskStats{Capacity: capacity, Available: 0},
			want: summary{Remove: []string{"never-used:space", "used-long-ago:space", "used-recently:space"}, BytesToFree: 200 * mib},
		},
		"ties on last used broken by first detected": {
			images: []Image{img("newer", 10, time.Hour, 30*time.Minute), img("older", 10, 2*time.Hour, 30*time.Minute)},
			disk:   DiskStats{Capacity: capacity, Available: 195 * mib}, // 81%... below high
			mutate: func(c *config.ImageGCConfiguration) { c.HighThresholdPercent = ptr.To[int32](81) },
			want:   summary{Remove: []string{"older:space"}, Spare: []string{"newer"}, BytesToFree: 5 * mib},
		},
		"minimum age protects fresh images": {
			images: []Image{img("fresh", 100, time.Minute, -1), img("old", 100, time.Hour, -1)},
			disk:   DiskStats{Capacity: capacity, Available: 0},
			want:   summary{Remove: []string{"old:space"}, Keep: []string{"fresh:min_age"}, BytesToFree: 200 * mib},
		},
		"minimum age 0 removes at once": {
			mutate: func(c *config.ImageGCConfiguration) { c.MinimumGCAge = &metav1.Duration{} },
			images: []Image{img("fresh", 100, 0, -1)},
			disk:   DiskStats{Capacity: capacity, Available: 0},
			want:   summary{Remove: []string{"fresh:space"}, BytesToFree: 200 * mib},
		},
		"in use by running or exited containers, pinned and sandbox images stay": {
			images: []Image{
				with(img("running", 10, time.Hour, 0), func(i *Image) { i.InUse = true }),
				with(img("exited", 10, time.Hour, time.Hour), func(i *Image) { i.InUse = true }),
				with(img("pinned", 10, time.Hour, -1), func(i *Image) { i.Pinned = true }),
				with(img("pause", 10, time.Hour, -1), func(i *Image) { i.Sandbox = true }),
				img("free", 10, time.Hour, -1),
			},
			disk: DiskStats{Capacity: capacity, Available: 0},
			want: summary{
				Remove:      []string{"free:space"},
				Keep:        []string{"running:in_use", "exited:in_use", "pinned:pinned", "pause:sandbox"},
				BytesToFree: 200 * mib,
			},
		},
		"maximum age removes whatever the disk usage": {
			mutate: func(c *config.ImageGCConfiguration) { c.MaximumGCAge = &metav1.Duration{Duration: 24 * time.Hour} },
			images: []Image{
				img("stale", 10, 48*time.Hour, 25*time.Hour),
				img("never-used-stale", 10, 30*time.Hour, -1),
				img("never-used-recent", 10, time.Hour, -1), // unused since first seen, 1h ago
				img("recent", 10, 48*time.Hour, time.Hour),
				with(img("stale-but-in-use", 10, 48*time.Hour, 25*time.Hour), func(i *Image) { i.InUse = true }),
			},
			disk: DiskStats{Capacity: capacity, Available: capacity},
			want: summary{
				Remove: []string{"never-used-stale:age", "stale:age"},
				Spare:  []string{"never-used-recent", "recent"},
				Keep:   []string{"stale-but-in-use:in_use"},
			},
		},
		"age removals count toward the space target": {
			mutate: func(c *config.ImageGCConfiguration) { c.MaximumGCAge = &metav1.Duration{Duration: 24 * time.Hour} },
			images: []Image{img("stale", 40, 48*time.Hour, 30*time.Hour), img("lru", 40, 2*time.Hour, 2*time.Hour), img("mru", 40, 2*time.Hour, time.Hour)},
			disk:   DiskStats{Capacity: capacity, Available: 150 * mib}, // needs 50 MiB; age frees 40
			want:   summary{Remove: []string{"stale:age", "lru:space"}, Spare: []string{"mru"}, BytesToFree: 10 * mib},
		},
		"high threshold 100 turns threshold GC off": {
			mutate: func(c *config.ImageGCConfiguration) { c.HighThresholdPercent = ptr.To[int32](100) },
			images: []Image{img("a", 10, time.Hour, -1)},
			disk:   DiskStats{Capacity: capacity, Available: 0},
			want:   summary{Spare: []string{"a"}},
		},
		"not enough eligible: everything eligible is planned": {
			images: []Image{img("a", 10, time.Hour, -1), with(img("b", 500, time.Hour, -1), func(i *Image) { i.InUse = true })},
			disk:   DiskStats{Capacity: capacity, Available: 0},
			want:   summary{Remove: []string{"a:space"}, Keep: []string{"b:in_use"}, BytesToFree: 200 * mib},
		},
		"available above capacity counts as capacity": {
			images: []Image{img("a", 10, time.Hour, -1)},
			disk:   DiskStats{Capacity: capacity, Available: 2 * capacity},
			want:   summary{Spare: []string{"a"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := policyFor(t, tc.mutate)
			plan, err := p.Plan(tc.images, tc.disk, t0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summarize(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanInvalidCapacity(t *testing.T) {
	_, err := policyFor(t, nil).Plan([]Image{img("a", 1, time.Hour, -1)}, DiskStats{}, t0)
	if !errors.Is(err, ErrInvalidDiskCapacity) {
		t.Errorf("Plan(capacity 0) error = %v, want ErrInvalidDiskCapacity", err)
	}
}

// TestPlanOnAHugeFilesystem: a filesystem of 200 PiB (CephFS, Lustre, a
// FUSE or thin volume may report that much). available*100 and
// capacity*(100-low) pass 2^64 there; usage and the threshold rule's goal
// are what they are on a small one.
func TestPlanOnAHugeFilesystem(t *testing.T) {
	const pib = uint64(1) << 50
	for _, tc := range []struct {
		name      string
		high, low int32
		disk      DiskStats
		usage     int
		target    uint64
	}{
		{"nearly empty", 80, 75, DiskStats{Capacity: 200 * pib, Available: 199 * pib}, 1, 0},
		{"half full", 20, 10, DiskStats{Capacity: 200 * pib, Available: 100 * pib}, 50, 80 * pib},
		{"full", 20, 0, DiskStats{Capacity: 200 * pib}, 100, 200 * pib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policyFor(t, func(c *config.ImageGCConfiguration) {
				c.HighThresholdPercent, c.LowThresholdPercent = ptr.To(tc.high), ptr.To(tc.low)
			})
			if got := tc.disk.UsagePercent(); got != tc.usage {
				t.Errorf("UsagePercent() = %d, want %d", got, tc.usage)
			}
			if got, want := p.overHighThreshold(tc.disk), tc.usage >= int(tc.high); got != want {
				t.Errorf("overHighThreshold = %v at %d%% usage, high threshold %d%%", got, tc.usage, tc.high)
			}
			plan, err := p.Plan(nil, tc.disk, t0)
			if err != nil {
				t.Fatal(err)
			}
			if plan.UsagePercent != tc.usage || plan.Target != tc.target {
				t.Errorf("plan for %d%% usage, target %d PiB; want %d%%, %d PiB", plan.UsagePercent, plan.Target/pib, tc.usage, tc.target/pib)
			}
		})
	}
}

func TestPlanExclusions(t *testing.T) {
	p := policyFor(t, func(c *config.ImageGCConfiguration) {
		c.Exclude = []string{"registry.k8s.io/*:*", "**/keep@sha256:*", "sha256:pinned-by-id"}
	})
	images := []Image{
		{ID: "sha256:1", RepoTags: []string{"registry.k8s.io/coredns:v1.11"}, Size: mib, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:2", RepoDigests: []string{"quay.io/keep@sha256:abc"}, Size: mib, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:pinned-by-id", Size: mib, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:3", RepoTags: []string{"registry.k8s.io/deep/path:v1"}, Size: mib, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:4", RepoTags: []string{"docker.io/library/nginx:1"}, Size: mib, FirstDetected: t0.Add(-time.Hour)},
	}
	plan, err := p.Plan(images, DiskStats{Capacity: 100 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := summary{
		Remove:      []string{"sha256:3:space", "sha256:4:space"}, // * does not cross "/"
		Keep:        []string{"sha256:1:excluded", "sha256:2:excluded", "sha256:pinned-by-id:excluded"},
		BytesToFree: 20 * mib,
	}
	if diff := cmp.Diff(want, summarize(plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

func TestPlanKeepNewestPerRepository(t *testing.T) {
	p := policyFor(t, func(c *config.ImageGCConfiguration) { c.KeepNewestPerRepository = 2 })
	tagged := func(id, tag string, used time.Duration) Image {
		return Image{ID: id, RepoTags: []string{tag}, Size: mib, FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-used)}
	}
	images := []Image{
		tagged("app-v1", "localhost:5000/app:v1", 5*time.Hour),
		tagged("app-v2", "localhost:5000/app:v2", 3*time.Hour),
		tagged("app-v3", "localhost:5000/app:v3", time.Hour),
		tagged("db-v1", "localhost:5000/db:v1", 9*time.Hour),
	}
	plan, err := p.Plan(images, DiskStats{Capacity: 100 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := summary{
		Remove:      []string{"app-v1:space"},
		Keep:        []string{"app-v2:newest_tags", "app-v3:newest_tags", "db-v1:newest_tags"},
		BytesToFree: 20 * mib,
	}
	if diff := cmp.Diff(want, summarize(plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}

// TestPlanTiesByArrival: images equal by last-used and first-detected
// times (pulled between two listings, never used) go in the order the
// runtime says they arrived, whatever their IDs; unknown arrivals first,
// then by ID. keepNewestPerRepository keeps the latest arrivals.
func TestPlanTiesByArrival(t *testing.T) {
	arrived := func(id string, after time.Duration) Image {
		i := img(id, 10, time.Hour, -1)
		if after > 0 {
			i.Arrived = t0.Add(-2*time.Hour + after)
		}
		return i
	}
	images := []Image{arrived("d", 1*time.Second), arrived("c", 2*time.Second), arrived("b", 3*time.Second),
		arrived("a", 4*time.Second), arrived("z", 0), arrived("y", 0)}
	plan, err := policyFor(t, nil).Plan(images, DiskStats{Capacity: 1000 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"y:space", "z:space", "d:space", "c:space", "b:space", "a:space"}
	if diff := cmp.Diff(want, summarize(plan).Remove); diff != "" {
		t.Errorf("removal order (-want +got):\n%s", diff)
	}

	same := func(id string, after time.Duration) Image {
		i := arrived(id, after)
		i.RepoTags = []string{"registry.local/app:" + id}
		return i
	}
	plan, err = policyFor(t, func(c *config.ImageGCConfiguration) { c.KeepNewestPerRepository = 1 }).
		Plan([]Image{same("v2", 2*time.Second), same("v1", time.Second)}, DiskStats{Capacity: 1000 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(summary{Remove: []string{"v1:space"}, Keep: []string{"v2:newest_tags"}, BytesToFree: 200 * mib}, summarize(plan)); diff != "" {
		t.Errorf("keepNewestPerRepository among images equal but for their arrival (-want +got):\n%s", diff)
	}
}

// TestPlanSharedLayers: with layers known, a layer shared by several images
// is freed once, when the last of them goes, and one shared with a kept
// image frees nothing.
func TestPlanSharedLayers(t *testing.T) {
	base := Layer{Key: unique.Make("sha256:base"), Size: 100 * mib}
	mk := func(id string, used time.Duration, own uint64, inUse bool) Image {
		return Image{
			ID: id, Size: 100*mib + own*mib, FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-used), InUse: inUse,
			Layers: []Layer{base, {Key: unique.Make("sha256:own-" + id), Size: own * mib}},
		}
	}
	p := policyFor(t, nil)

	// Three unused images share the base: removing all frees it once.
	plan, err := p.Plan([]Image{mk("a", 3*time.Hour, 10, false), mk("b", 2*time.Hour, 20, false), mk("c", time.Hour, 30, false)},
		DiskStats{Capacity: 1000 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, d := range plan.Remove {
		got = append(got, d.Bytes/mib)
	}
	if diff := cmp.Diff([]uint64{10, 20, 130}, got); diff != "" {
		t.Errorf("bytes per removal in MiB (-want +got):\n%s", diff)
	}
	if !plan.ExactAccounting || plan.EstimatedFreed != 160*mib {
		t.Errorf("exact=%v estimated=%d MiB, want exact and 160 MiB (CRI sizes would say 360)", plan.ExactAccounting, plan.EstimatedFreed/mib)
	}

	// An image in use keeps the base: removing the others frees only their own layers.
	plan, err = p.Plan([]Image{mk("a", 3*time.Hour, 10, false), mk("b", 2*time.Hour, 20, false), mk("c", time.Hour, 30, true)},
		DiskStats{Capacity: 1000 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.EstimatedFreed != 30*mib {
		t.Errorf("estimated = %d MiB, want 30 (the base stays for the image in use)", plan.EstimatedFreed/mib)
	}

	// Without layers for every image, CRI sizes are used for all.
	noLayers := mk("d", time.Hour, 5, false)
	noLayers.Layers = nil
	plan, err = p.Plan([]Image{mk("a", 3*time.Hour, 10, false), noLayers}, DiskStats{Capacity: 1000 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if plan.ExactAccounting || plan.EstimatedFreed != 215*mib {
		t.Errorf("exact=%v estimated=%d MiB, want CRI sizes (215)", plan.ExactAccounting, plan.EstimatedFreed/mib)
	}
}

func TestRepository(t *testing.T) {
	for in, want := range map[string]string{
		"nginx:1":                       "nginx",
		"localhost:5000/app:v1":         "localhost:5000/app",
		"localhost:5000/app":            "localhost:5000/app",
		"registry.k8s.io/pause:3.10":    "registry.k8s.io/pause",
		"quay.io/org/deep/name:latest":  "quay.io/org/deep/name",
		"127.0.0.1:41235/ngc/a:padding": "127.0.0.1:41235/ngc/a",
	} {
		if got := repository(in); got != want {
			t.Errorf("repository(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUsagePercent(t *testing.T) {
	for _, tc := range []struct {
		d    DiskStats
		want int
	}{
		{DiskStats{Capacity: 100, Available: 15}, 85},
		{DiskStats{Capacity: 1000, Available: 151}, 85}, // 15.1% available rounds down: 85
		{DiskStats{Capacity: 100, Available: 0}, 100},
		{DiskStats{Capacity: 100, Available: 200}, 0},
		{DiskStats{}, 0},
	} {
		if got := tc.d.UsagePercent(); got != tc.want {
			t.Errorf("%+v.UsagePercent() = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func policyConfig() config.ImageGCConfiguration { return config.Defaulted().ImageGC }

// TestMinimumAgeFromTheWatchWithoutArrival: the records say nodegc first
// saw both images an hour ago; its current watch began a minute ago. The
// runtime says when one arrived (an hour ago): its minimum age counts from
// the records. It does not say for the other (CRI-O, containerd's API not
// answering): the copy the records date may have been removed and pulled
// again while nodegc was down, so its minimum age counts from the watch's
// start; once that is older than the minimum age, both go.
func TestMinimumAgeFromTheWatchWithoutArrival(t *testing.T) {
	p := policyFor(t, func(c *config.ImageGCConfiguration) {
		c.MinimumGCAge = &metav1.Duration{Duration: 10 * time.Minute}
		c.HighThresholdPercent, c.LowThresholdPercent = ptr.To[int32](1), ptr.To[int32](0)
	})
	watch := t0.Add(-time.Minute)
	known := with(img("sha256:known", 10, time.Hour, -1), func(i *Image) { i.Arrived, i.WatchedSince = t0.Add(-time.Hour), watch })
	unknown := with(img("sha256:unknown", 10, time.Hour, -1), func(i *Image) { i.WatchedSince = watch })
	plan, err := p.Plan([]Image{unknown, known}, DiskStats{Capacity: 100 * mib, Available: 10 * mib}, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := summary{Remove: []string{"sha256:known:space"}, Keep: []string{"sha256:unknown:" + KeepMinAge}, BytesToFree: 90 * mib}
	if diff := cmp.Diff(want, summarize(plan)); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	unknown.WatchedSince = t0.Add(-11 * time.Minute)
	plan, err = p.Plan([]Image{unknown, known}, DiskStats{Capacity: 100 * mib, Available: 10 * mib}, t0)
	if err != nil {
		t.Fatal(err)
	}
	// The records' order: equal times, then the arrival (none first).
	want = summary{Remove: []string{"sha256:unknown:space", "sha256:known:space"}, BytesToFree: 90 * mib}
	if diff := cmp.Diff(want, summarize(plan)); diff != "" {
		t.Errorf("a watch older than the minimum age (-want +got):\n%s", diff)
	}
}

// TestNewestPerRepositoryByDigest: keeping the newest image of every
// repository, images pulled by digest alone (a pod's app@sha256:..., or
// app:v2@sha256:..., which containerd keeps under the digest name only)
// count in their repository: the more recently used stays. Before, they
// had no tag, and the rule kept none of them. An image with a tag of the
// repository comes before one that only kept its digest there after its
// tag moved to a newer pull, even used more recently, and even with a tag
// of another repository (kept as that one's newest).
func TestNewestPerRepositoryByDigest(t *testing.T) {
	p := policyFor(t, func(c *config.ImageGCConfiguration) { c.KeepNewestPerRepository = 1 })
	img := func(id, repo string, tagged bool, used time.Duration) Image {
		i := Image{ID: id, RepoDigests: []string{repo + "@sha256:" + strings.Repeat(id[len(id)-1:], 64)}, Size: mib,
			FirstDetected: t0.Add(-10 * time.Hour), LastUsed: t0.Add(-used)}
		if tagged {
			i.RepoTags = []string{repo + ":v" + id[len(id)-1:]}
		}
		return i
	}
	// sha256:6 kept only its digest of api after api:sha256:5 moved to
	// sha256:5; it holds a tag of another repository, and was used later.
	elsewhere := img("sha256:6", "ghcr.io/org/api", false, time.Minute)
	elsewhere.RepoTags = []string{"ghcr.io/org/tools:1"}
	plan, err := p.Plan([]Image{
		img("sha256:1", "ghcr.io/org/app", false, 5*time.Hour), img("sha256:2", "ghcr.io/org/app", false, time.Hour),
		img("sha256:3", "ghcr.io/org/web", false, time.Minute), img("sha256:4", "ghcr.io/org/web", true, 2*time.Hour),
		img("sha256:5", "ghcr.io/org/api", true, 3*time.Hour), elsewhere,
	}, DiskStats{Capacity: 100 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	got := summarize(plan)
	want := summary{Remove: []string{"sha256:1:space", "sha256:3:space"},
		Keep: []string{"sha256:2:newest_tags", "sha256:4:newest_tags", "sha256:5:newest_tags", "sha256:6:newest_tags"}, BytesToFree: got.BytesToFree}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}
