package images

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"
)

// ErrInvalidDiskCapacity is returned when the image filesystem reports a
// capacity of 0, or numbers no filesystem has (more available than its
// capacity; statfs numbers diskstats.ErrImplausible refuses): usage cannot
// be computed, so no GC runs (kubelet's InvalidDiskCapacity).
var ErrInvalidDiskCapacity = errors.New("invalid capacity on image filesystem")

// Reasons for removing an image. They are metric label values, the same as
// kubelet_image_garbage_collected_total's.
const (
	ReasonAge   = "age"
	ReasonSpace = "space"
)

// Reasons for keeping an image. They are metric label values.
const (
	KeepInUse      = "in_use"
	KeepPinned     = "pinned"
	KeepSandbox    = "sandbox"
	KeepScheduled  = "scheduled"
	KeepExcluded   = "excluded"
	KeepMinAge     = "min_age"
	KeepNewestTags = "newest_tags"
	// KeepUnreadable: the runtime cannot read what the image holds
	// (containerd: a manifest or config blob gone from its content store)
	// while records of containers exist, so whether one was made from it
	// cannot be told (Image.Unreadable).
	KeepUnreadable = "unreadable"
	KeepNotNeeded  = "not_needed"
	// KeepRemoveFailed: the runtime failed to remove the image in this run;
	// the run plans without it (see Policy.replan).
	KeepRemoveFailed = "remove_failed"
)

// Decision is what the plan does with one image, and why.
type Decision struct {
	Image *Image
	// Reason is a Reason* constant for removals, a Keep* one otherwise.
	Reason string
	// Bytes is, for a removal, what it frees given the removals before it
	// in the plan; for a kept image, what removing it alone would free.
	Bytes uint64
}

// Plan is the outcome of planning: what to remove, in order, and what to
// keep and why. Plans are what `nodegc plan` and dry-run print.
type Plan struct {
	Now  time.Time
	Disk DiskStats
	// UsagePercent is the disk usage the plan was made for.
	UsagePercent int
	// Target is what the threshold rule asks to free in all (0 under the
	// high threshold): kubelet's capacity*(100-low)/100 - available, with
	// Ahead counted as already written.
	Target uint64
	// Required is the part of Target the high threshold asks for now
	// (kubelet's rule, without Ahead): a run that frees less fails
	// (FreeDiskSpaceError); what Ahead adds is freed as images allow.
	Required uint64
	// Ahead is what the fill rate says will be written within
	// fillRateHorizon, when it would take the filesystem to the kubelet's
	// eviction threshold (PlanAhead); 0 otherwise.
	Ahead uint64
	// BytesToFree is Target less what the plan's age removals free.
	BytesToFree uint64
	// Remove lists the images to remove, age removals first, then space
	// removals in LRU order, as many as the estimate says are needed.
	Remove []Decision
	// Spare lists further eligible images in LRU order that the plan does
	// not need (Reason KeepNotNeeded). When a planned removal fails or its
	// image turns out to be in use, the executor plans again (replan) and
	// may take some of them.
	Spare []Decision
	// Keep lists every other image with the reason it stays.
	Keep []Decision
	// EstimatedFreed is the sum of Remove's Bytes.
	EstimatedFreed uint64
	// ExactAccounting says whether layer sizes (true) or CRI sizes were used.
	ExactAccounting bool
	// BlobsElsewhere says why exact accounting counted snapshots only (the
	// content store is on another filesystem: ContainerdLayers), "" when
	// it counted blobs too.
	BlobsElsewhere string
	// PodsView says how the scheduled rule saw the pods bound to this node:
	// "" without a pod source (the rule is off), PodsAuthoritative, or why
	// the view was not (then the rule kept more: Manager.markScheduled).
	PodsView string
}

// PodsAuthoritative is Plan.PodsView for a pod view that could be trusted.
const PodsAuthoritative = "authoritative"

// Plan decides, for the images and disk given, at time now, what to remove
// and what to keep. It is a pure function: it reads no clock and does no I/O.
// The images' InUse, Pinned and Sandbox flags must be current.
func (p *Policy) Plan(images []Image, disk DiskStats, now time.Time) (*Plan, error) {
	return p.PlanAhead(images, disk, now, 0)
}

// PlanAhead plans as Plan does for the disk as it will be once ahead more
// bytes are written: with ahead > 0 (the fill rate says the kubelet's
// eviction threshold is near), the threshold rule frees down to the low
// threshold from there, even under the high threshold now. It is pure.
func (p *Policy) PlanAhead(images []Image, disk DiskStats, now time.Time, ahead uint64) (*Plan, error) {
	return p.planFor(images, disk, now, demand{ahead: ahead})
}

// demand is what the disk asks of a run beyond what the plan reads from it.
type demand struct {
	// ahead is what the fill rate says will be written within the horizon
	// (PlanAhead).
	ahead uint64
	// toLow says usage reached the high threshold and has not been under
	// the low one since: the threshold rule frees down to the low threshold
	// even under the high one now, as it does with ahead, and as for ahead
	// a run that cannot is no failure.
	toLow bool
}

func (p *Policy) planFor(images []Image, disk DiskStats, now time.Time, d demand) (*Plan, error) {
	if disk.Capacity == 0 {
		return nil, ErrInvalidDiskCapacity
	}
	projected := disk
	projected.Available -= min(d.ahead, disk.Available)
	// kubelet: capacity*(100-low)/100 - available (without its overflow
	// past 2^64 bytes).
	goal := mulDiv(disk.Capacity, uint64(100-p.lowThresholdPercent()), 100)
	var target, required uint64
	if p.overHighThreshold(disk) {
		required = goal - min(goal, disk.Available)
		target = required
	}
	if (d.ahead > 0 || d.toLow) && p.thresholdGCEnabled() {
		target = goal - min(goal, projected.Available)
	}
	plan := p.plan(images, nil, target, disk, now)
	plan.Ahead, plan.Required = d.ahead, required
	return plan, nil
}

// replan plans again within a run, after planned removals that did not
// happen: images are those still there (the ones removed in this run left
// out, so that the layers they held count as freed), held names the images
// that stay for the rest of the run whatever their eligibility, with the
// Keep* reason (KeepInUse: in use at the last check; KeepRemoveFailed: the
// runtime failed to remove it), and target is what the threshold rule still
// asks to free. Like Plan, it is pure.
func (p *Policy) replan(images []Image, held map[string]string, target uint64, disk DiskStats, now time.Time) *Plan {
	return p.plan(images, held, target, disk, now)
}

func (p *Policy) plan(images []Image, held map[string]string, target uint64, disk DiskStats, now time.Time) *Plan {
	acct := p.layers.account(images)
	plan := &Plan{Now: now, Disk: disk, UsagePercent: disk.UsagePercent(), ExactAccounting: acct.exact, Target: target}

	k := &keepContext{now: now, newest: p.newestPerRepository(images)}
	var candidates []int // indexes into images
	for i := range images {
		reason := held[images[i].ID]
		if reason == "" {
			reason = p.protected(&images[i], k)
		}
		if reason != "" {
			plan.Keep = append(plan.Keep, Decision{Image: &images[i], Reason: reason, Bytes: acct.alone(images, i)})
			continue
		}
		candidates = append(candidates, i)
	}
	// LRU first; never-used images (zero LastUsed) before any used one;
	// ties by first-detected time, then arrival, then ID so plans are
	// deterministic.
	slices.SortFunc(candidates, func(i, j int) int {
		a, b := &images[i], &images[j]
		return cmp.Or(a.LastUsed.Compare(b.LastUsed), a.FirstDetected.Compare(b.FirstDetected), a.Arrived.Compare(b.Arrived),
			strings.Compare(a.ID, b.ID))
	})

	// The eviction rules remove what they hold for whatever the disk usage.
	rest := candidates[:0:0]
	for _, i := range candidates {
		if reason := p.evicted(&images[i], now); reason != "" {
			plan.Remove = append(plan.Remove, Decision{Image: &images[i], Reason: reason, Bytes: acct.remove(images, i)})
			continue
		}
		rest = append(rest, i)
	}
	var freedByAge uint64
	for _, d := range plan.Remove {
		freedByAge += d.Bytes
	}

	plan.BytesToFree = target - min(target, freedByAge)
	var freed uint64
	for _, i := range rest {
		if freed < plan.BytesToFree {
			b := acct.remove(images, i)
			plan.Remove = append(plan.Remove, Decision{Image: &images[i], Reason: ReasonSpace, Bytes: b})
			freed += b
			continue
		}
		plan.Spare = append(plan.Spare, Decision{Image: &images[i], Reason: KeepNotNeeded, Bytes: acct.alone(images, i)})
	}
	for _, d := range plan.Remove {
		plan.EstimatedFreed += d.Bytes
	}
	return plan
}

// protected returns why img must stay whatever the disk usage (the first
// keep rule that holds), or "".
func (p *Policy) protected(img *Image, k *keepContext) string {
	for _, r := range keepRules {
		if r.holds(p, img, k) {
			return r.reason
		}
	}
	return ""
}

// keepContext is what the keep rules read besides the policy and the image.
type keepContext struct {
	now time.Time
	// newest holds the IDs of the keepNewestPerRepository most recently
	// used images of every repository.
	newest map[string]bool
}

// keepRules keep an image whatever the disk usage, tried in this order: the
// first that holds gives the reason. A new rule is a new entry here (with
// its Keep* reason, which the skipped-images metric then lists by itself);
// a setting it needs is read from p.cfg.
var keepRules = []struct {
	reason string
	holds  func(p *Policy, img *Image, k *keepContext) bool
}{
	{KeepInUse, func(_ *Policy, img *Image, _ *keepContext) bool { return img.InUse }},
	{KeepPinned, func(_ *Policy, img *Image, _ *keepContext) bool { return img.Pinned }},
	{KeepSandbox, func(_ *Policy, img *Image, _ *keepContext) bool { return img.Sandbox }},
	{KeepScheduled, func(_ *Policy, img *Image, _ *keepContext) bool { return img.Scheduled }},
	{KeepExcluded, func(p *Policy, img *Image, _ *keepContext) bool { return p.excluded(img) }},
	{KeepUnreadable, func(_ *Policy, img *Image, _ *keepContext) bool { return img.Unreadable }},
	{KeepMinAge, func(p *Policy, img *Image, k *keepContext) bool { return k.now.Sub(youngSince(img)) < p.minAge() }},
	{KeepNewestTags, func(_ *Policy, img *Image, k *keepContext) bool { return k.newest[img.ID] }},
}

// youngSince is when img's minimum age counts from: when nodegc first saw
// it, or, when the runtime does not say when it arrived (Arrived zero: a
// runtime other than containerd, containerd's API not answering, or its
// read failed), not before nodegc began its current watch of the node. An
// image removed and pulled again while nodegc was down cannot be told from
// the copy the records date without the arrival, so its minimum age counts
// as the kubelet's does, from the start. The LRU order keeps the recorded
// times.
func youngSince(img *Image) time.Time {
	if img.Arrived.IsZero() {
		return latest(img.FirstDetected, img.WatchedSince)
	}
	return img.FirstDetected
}

// evicted returns why img, which no keep rule protects, goes whatever the
// disk usage (the first eviction rule that holds), or "".
func (p *Policy) evicted(img *Image, now time.Time) string {
	for _, r := range evictionRules {
		if r.holds(p, img, now) {
			return r.reason
		}
	}
	return ""
}

// evictionRules remove an image that no keep rule protects, whatever the
// disk usage, before the threshold rule (ReasonSpace) frees what is still
// needed in LRU order. A new rule is a new entry here (with its Reason*,
// which the removed-images metric then lists by itself); a setting it needs
// is read from p.cfg.
var evictionRules = []struct {
	reason string
	holds  func(p *Policy, img *Image, now time.Time) bool
}{
	// Unused for longer than maximumGCAge (0: off), as far as nodegc
	// watched: not before it began to watch without a break, as the
	// kubelet counts from its own start.
	{ReasonAge, func(p *Policy, img *Image, now time.Time) bool {
		return p.maxAge() > 0 && now.Sub(latest(lastActive(img), img.WatchedSince)) > p.maxAge()
	}},
}

// planRemoveReasons are the reasons a plan's Remove gives: every eviction
// rule's and ReasonSpace.
func planRemoveReasons() []string {
	out := make([]string, 0, len(evictionRules)+1)
	for _, r := range evictionRules {
		out = append(out, r.reason)
	}
	return append(out, ReasonSpace)
}

// planKeepReasons are the reasons a plan's Keep and Spare give: every keep
// rule's and KeepNotNeeded (KeepRemoveFailed only appears in the plans a
// run makes again, which are not counted).
func planKeepReasons() []string {
	out := make([]string, 0, len(keepRules)+1)
	for _, r := range keepRules {
		out = append(out, r.reason)
	}
	return append(out, KeepNotNeeded)
}

// excluded matches the exclusion patterns (see internal/imageref) against
// the image's tags, digests and ID.
func (p *Policy) excluded(img *Image) bool {
	return p.exclude.MatchImage(img.ID, img.RepoTags, img.RepoDigests)
}

// newestPerRepository returns the IDs of the keepNewest most recently used
// images of every repository, by its tags and digests: an image pulled by
// digest alone has no tag. Images with a tag of the repository come first:
// an image that lost its tag to a newer pull keeps its digest, and fills a
// place only where fewer than keepNewest images hold a tag there.
func (p *Policy) newestPerRepository(images []Image) map[string]bool {
	keepNewest := int(p.cfg.KeepNewestPerRepository)
	if keepNewest == 0 {
		return nil
	}
	byRepo := map[string][]*Image{}
	for i := range images {
		img := &images[i]
		for _, repo := range repositories(img) {
			byRepo[repo] = append(byRepo[repo], img)
		}
	}
	keep := map[string]bool{}
	for repo, imgs := range byRepo {
		slices.SortFunc(imgs, func(a, b *Image) int {
			return cmp.Or(cmp.Compare(untaggedIn(a, repo), untaggedIn(b, repo)), lastActive(b).Compare(lastActive(a)), b.FirstDetected.Compare(a.FirstDetected), b.Arrived.Compare(a.Arrived),
				strings.Compare(a.ID, b.ID))
		})
		for _, img := range imgs[:min(keepNewest, len(imgs))] {
			keep[img.ID] = true
		}
	}
	return keep
}

// lastActive is when the image was last used, or first seen if never used.
func lastActive(img *Image) time.Time {
	if img.LastUsed.After(img.FirstDetected) {
		return img.LastUsed
	}
	return img.FirstDetected
}

// untaggedIn is 1 for an image without a tag of repo, else 0.
func untaggedIn(img *Image, repo string) int {
	if slices.ContainsFunc(img.RepoTags, func(t string) bool { return repository(t) == repo }) {
		return 0
	}
	return 1
}

// repositories returns the repositories of img's tags and digests, each
// once.
func repositories(img *Image) []string {
	var out []string
	for _, t := range img.RepoTags {
		if r := repository(t); !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, d := range img.RepoDigests {
		if r, _, ok := strings.Cut(d, "@"); ok && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// repository returns the repository of a "repository:tag" reference:
// everything before the tag's colon (a colon before the last slash belongs
// to a registry port).
func repository(tag string) string {
	slash := strings.LastIndexByte(tag, '/')
	if i := strings.LastIndexByte(tag, ':'); i > slash {
		return tag[:i]
	}
	return tag
}
