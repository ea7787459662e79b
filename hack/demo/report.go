package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
)

// snapshot is the node as CRI and statfs show it at one moment.
type snapshot struct {
	fs         node.FSStats
	usage      int                              // percent, as nodegc computes it
	images     map[string]*runtimeapi.Image     // by ID
	containers map[string]*runtimeapi.Container // by ID
	sandboxes  map[string]*runtimeapi.PodSandbox
}

func (d *demo) snapshot() (*snapshot, error) {
	ctx, cancel := context.WithTimeout(d.ctx(), 20*time.Second)
	defer cancel()
	st, err := d.node.FSStats()
	if err != nil {
		return nil, err
	}
	s := &snapshot{fs: st, usage: usagePercent(st), images: map[string]*runtimeapi.Image{},
		containers: map[string]*runtimeapi.Container{}, sandboxes: map[string]*runtimeapi.PodSandbox{}}
	imgs, err := d.node.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	for _, i := range imgs.GetImages() {
		s.images[i.GetId()] = i
	}
	cs, err := d.node.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range cs.GetContainers() {
		s.containers[c.GetId()] = c
	}
	sbs, err := d.node.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	for _, sb := range sbs.GetItems() {
		s.sandboxes[sb.GetId()] = sb
	}
	return s, nil
}

// usagePercent is the image filesystem usage as nodegc (and the kubelet)
// computes it: 100 - available*100/capacity.
func usagePercent(st node.FSStats) int {
	if st.Capacity == 0 {
		return 0
	}
	return 100 - int(min(st.Available, st.Capacity)*100/st.Capacity)
}

const exitedOnly = true

// containersOf returns the IDs of the pod's containers on the node.
func (s *snapshot) containersOf(p *pod, exited bool) []string {
	var out []string
	for id, c := range s.containers {
		if c.GetLabels()[node.LabelPodUID] != p.uid() {
			continue
		}
		if exited && c.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
			continue
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (s *snapshot) sandboxesOf(p *pod) []string {
	var out []string
	for id, sb := range s.sandboxes {
		if sb.GetMetadata().GetUid() == p.uid() {
			out = append(out, id)
		}
	}
	return out
}

// leftovers says what the pod still has on the node (containers,
// sandboxes, its log directory, its containers' log links); "" for nothing.
func (d *demo) leftovers(s *snapshot, p *pod) string {
	var left []string
	if c := len(s.containersOf(p, false)); c > 0 {
		left = append(left, fmt.Sprintf("%d container(s)", c))
	}
	if sb := len(s.sandboxesOf(p)); sb > 0 {
		left = append(left, fmt.Sprintf("%d sandbox(es)", sb))
	}
	if exists(p.logDir(d.node)) {
		left = append(left, "log directory")
	}
	if l := len(d.logLinks(p)); l > 0 {
		left = append(left, fmt.Sprintf("%d log link(s)", l))
	}
	return strings.Join(left, ", ")
}

// logLinks returns the pod's container log links (the kubelet's
// /var/log/containers/POD_NAMESPACE_CONTAINER-ID.log).
func (d *demo) logLinks(p *pod) []string {
	links, _ := filepath.Glob(filepath.Join(d.linkDir, fmt.Sprintf("%s_%s_*.log", p.obj.Name, p.obj.Namespace)))
	return links
}

// imageUsers maps image IDs to the containers using them.
func (s *snapshot) imageUsers() map[string][]*runtimeapi.Container {
	out := map[string][]*runtimeapi.Container{}
	for _, c := range s.containers {
		id := c.GetImageRef()
		if id == "" {
			id = c.GetImage().GetImage()
		}
		out[id] = append(out[id], c)
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func mibs(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/mib) }

// repoTag strips the registry host from a reference.
func repoTag(ref string) string {
	if _, rest, ok := strings.Cut(ref, "/"); ok {
		return rest
	}
	return ref
}

func imageName(i *runtimeapi.Image) string {
	if tags := i.GetRepoTags(); len(tags) > 0 {
		names := make([]string, len(tags))
		for k, t := range tags {
			names[k] = repoTag(t)
		}
		return strings.Join(names, ",")
	}
	return shortID(i.GetId())
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// check is one verified claim of the report.
type check struct {
	name   string
	ok     bool
	detail string
}

func (d *demo) stepReport() {
	d.step(6, "Report")
	after, err := d.snapshot()
	d.must(err, "observe the node")
	d.after = after
	d.planAfter, err = d.cfg.planJSON(d.ctx())
	d.must(err, "run nodegc plan -o json")
	d.metrics, err = d.agent.Scrape(d.ctx())
	d.must(err, "read nodegc's /metrics")
	before := d.before

	// Disk.
	say("[demo]    IMAGE FILESYSTEM (%s, %s): usage %d%% → %d%% (available %s → %s); thresholds: high %d%%, low %d%%",
		d.node.FSKind, mibs(after.fs.Capacity), before.usage, after.usage, mibs(before.fs.Available), mibs(after.fs.Available),
		highThreshold, lowThreshold)
	d.writePlot()
	est, _ := testbed.MetricSum(d.metrics, "nodegc_image_gc_bytes_estimated_freed_total")
	meas, _ := testbed.MetricSum(d.metrics, "nodegc_image_gc_bytes_measured_freed_total")
	tgt, _ := testbed.MetricSum(d.metrics, "nodegc_image_gc_bytes_targeted_total")
	info("nodegc targeted %s, estimated %s freed (layers shared with kept images not counted), measured %s on the filesystem",
		mibs(uint64(tgt)), mibs(uint64(est)), mibs(uint64(meas)))

	// Images.
	ownBytes := map[string]uint64{}
	for _, r := range d.planBefore.Images {
		ownBytes[r.ID] = r.Bytes
	}
	var removed []*runtimeapi.Image
	for id, img := range before.images {
		if after.images[id] == nil {
			removed = append(removed, img)
		}
	}
	sort.Slice(removed, func(i, j int) bool { return imageName(removed[i]) < imageName(removed[j]) })
	var removedBytes uint64
	usersBefore := before.imageUsers()
	say("[demo]")
	say("[demo]    IMAGES REMOVED (%d of %d)", len(removed), len(before.images))
	for _, img := range removed {
		removedBytes += ownBytes[img.GetId()]
		why := "used by no container"
		if cs := usersBefore[img.GetId()]; len(cs) > 0 {
			why = "used only by containers of Pods deleted during the demo, since removed"
		}
		info("  %-28s %10s   %s", imageName(img), mibs(ownBytes[img.GetId()]), why)
	}
	info("  (bytes: what the image alone holds, per nodegc's layer accounting before the run; together %s)", mibs(removedBytes))

	keptReason := map[string]string{}
	for _, r := range d.planAfter.Images {
		keptReason[r.ID] = r.Reason
	}
	users := after.imageUsers()
	type kept struct{ name, reason, why string }
	var keptRows []kept
	for id, img := range after.images {
		reason := keptReason[id]
		why := ""
		switch reason {
		case "in_use":
			var names []string
			for _, c := range users[id] {
				names = append(names, fmt.Sprintf("%s/%s %s#%d (%s)", c.GetLabels()[node.LabelPodNamespace], c.GetLabels()[node.LabelPodName],
					c.GetMetadata().GetName(), c.GetMetadata().GetAttempt(), strings.ToLower(strings.TrimPrefix(c.GetState().String(), "CONTAINER_"))))
			}
			slices.Sort(names)
			why = "used by " + strings.Join(names, ", ")
		case "sandbox", "pinned":
			why = "the runtime's sandbox (pause) image"
		case "excluded":
			why = "matches imageGC.exclude " + excludePattern
		case "not_needed":
			why = fmt.Sprintf("eligible, but usage is at or below the low threshold (%d%%)", lowThreshold)
		}
		keptRows = append(keptRows, kept{imageName(img), reason, why})
	}
	sort.Slice(keptRows, func(i, j int) bool {
		if keptRows[i].reason != keptRows[j].reason {
			return keptRows[i].reason < keptRows[j].reason
		}
		return keptRows[i].name < keptRows[j].name
	})
	say("[demo]")
	say("[demo]    IMAGES KEPT (%d), with nodegc's reason", len(keptRows))
	for _, k := range keptRows {
		info("  %-28s %-11s %s", k.name, k.reason, k.why)
	}

	// Containers.
	say("[demo]")
	say("[demo]    CONTAINERS")
	workerLeft := after.containersOf(d.w.worker, false)
	info("  %s: %d exited instances + 1 running → %d container(s) left: the newest exited instance (attempt %d) and the running one; %d trimmed (maxPerPodContainer=1)",
		d.w.worker.name(), workerRestarts, len(workerLeft), workerRestarts-1, workerRestarts+1-len(workerLeft))
	info("  %s (deleted from the API): container, sandbox, log directory and log link removed %v after the deletion",
		d.w.report.name(), d.reportGoneIn.Round(100*time.Millisecond))
	info("  Deployment's Pods %s, %s: containers, sandboxes, log directories and log links removed once the Pods were gone",
		d.w.web[0].obj.Name, d.w.web[1].obj.Name)

	// Owner GC.
	say("[demo]")
	say("[demo]    OWNER CASCADE")
	info("  Deployment %s/web deleted (Background) → ReplicaSet %s and 2 Pods collected by nodegc's owner GC in %v",
		nsShop, d.w.replicaSet.Name, d.cascadeTook.Round(100*time.Millisecond))

	// Metrics.
	say("[demo]")
	say("[demo]    NODEGC /metrics (non-zero samples of a few families; all at %s)", d.cfg.metricsURL)
	shown := []string{"nodegc_image_gc_images_removed_total", "nodegc_image_gc_bytes_",
		"nodegc_image_gc_runs_total", "nodegc_image_fs_usage_percent", "nodegc_container_gc_containers_removed_total",
		"nodegc_container_gc_sandboxes_removed_total", "nodegc_container_gc_log_directories_removed_total",
		"nodegc_container_gc_log_links_removed_total", "nodegc_owner_gc_actions_total", "nodegc_owner_gc_api_requests_total"}
	for _, s := range testbed.Samples(d.metrics) {
		family := slices.ContainsFunc(shown, func(prefix string) bool { return strings.HasPrefix(s.Name, prefix) })
		if family && s.Value != 0 && !strings.HasSuffix(s.Name, "_bucket") {
			say("[demo]    │ %s", s)
		}
	}

	d.checks = append(d.checks, d.verify()...)
	say("[demo]")
	say("[demo]    CHECKS")
	for _, c := range d.checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		info("  [%s] %s: %s", mark, c.name, c.detail)
	}
}

// writePlot ends the usage recording and writes the plot into the run's
// directory; that it exists and is not empty is one of the checks.
func (d *demo) writePlot() {
	tr := d.usage.stop()
	d.plotPath = filepath.Join(d.dir, "usage.svg")
	err := writeUsagePlot(d.plotPath, tr)
	if err == nil {
		var st os.FileInfo
		if st, err = os.Stat(d.plotPath); err == nil && st.Size() == 0 {
			err = fmt.Errorf("%s is empty", d.plotPath)
		}
	}
	images := 0
	for _, r := range tr.runs {
		if r.collector == "image" {
			images++
		}
	}
	detail := ""
	if err != nil {
		detail = err.Error()
	} else {
		detail = fmt.Sprintf("%s: %d readings over %.0fs, %d image GC runs and %d container GC runs marked",
			d.plotPath, len(tr.points), tr.points[len(tr.points)-1].at.Seconds(), images, len(tr.runs)-images)
	}
	d.checks = append(d.checks, check{"the usage plot was written", err == nil && images > 0, detail})
	info("usage over the run (SVG, open it in a browser): %s", d.plotPath)
}

// verify checks the claims of the report against the node and the API.
func (d *demo) verify() []check {
	before, after := d.before, d.after
	var out []check
	add := func(name string, ok bool, format string, args ...any) {
		out = append(out, check{name, ok, fmt.Sprintf(format, args...)})
	}

	add("disk usage went from at or above the high threshold to at or below the low one",
		before.usage >= highThreshold && after.usage <= lowThreshold,
		"%d%% → %d%% (high %d%%, low %d%%)", before.usage, after.usage, highThreshold, lowThreshold)

	// Images: nothing in use, pinned/sandbox or excluded is gone, and every
	// removed image was eligible: used by no container at the start, or
	// only by containers of Pods deleted during the demo.
	var missing []string
	for id, cs := range after.imageUsers() {
		if after.images[id] == nil {
			missing = append(missing, fmt.Sprintf("%s (used by %d container(s))", shortID(id), len(cs)))
		}
	}
	add("every image used by a container is still present", len(missing) == 0, "%s", orNone(strings.Join(missing, "; "), fmt.Sprintf("all %d images in use are present", len(after.imageUsers()))))
	add("the sandbox (pause) image is still present", after.images[d.w.pause.ID()] != nil, "%s", repoTag(d.w.pause.Ref))
	debugImg := d.w.images["tools/debug:1.0"]
	add("the excluded image is still present", after.images[debugImg.ID()] != nil, "%s (%s)", repoTag(debugImg.Ref), excludePattern)
	deletedPods := map[string]bool{d.w.report.uid(): true}
	for _, p := range d.w.web {
		deletedPods[p.uid()] = true
	}
	var ineligible []string
	usersBefore := before.imageUsers()
	removed := 0
	for id, img := range before.images {
		if after.images[id] != nil {
			continue
		}
		removed++
		for _, c := range usersBefore[id] {
			if !deletedPods[c.GetLabels()[node.LabelPodUID]] {
				ineligible = append(ineligible, fmt.Sprintf("%s (was used by %s)", imageName(img), c.GetMetadata().GetName()))
				break
			}
		}
	}
	add("only eligible images were removed", len(ineligible) == 0 && removed > 0, "%s",
		orNone(strings.Join(ineligible, "; "), fmt.Sprintf("%d removed, none used by a container of a live Pod", removed)))

	// Containers.
	workerLeft := after.containersOf(d.w.worker, false)
	want := []string{d.w.workerDead[workerRestarts-1], d.w.workerRunning}
	slices.Sort(want)
	detail := fmt.Sprintf("%d of %d exited instances removed; left: the newest exited one (attempt %d) and the running one",
		workerRestarts-len(after.containersOf(d.w.worker, exitedOnly)), workerRestarts, workerRestarts-1)
	if !slices.Equal(workerLeft, want) {
		detail = fmt.Sprintf("left: %v, want the newest exited one (attempt %d) and the running one: %v", workerLeft, workerRestarts-1, want)
	}
	links := len(d.logLinks(d.w.worker))
	if links != 2 {
		detail += fmt.Sprintf("; but %d log links left, want 2 (one per container)", links)
	}
	add("the restarted container was trimmed to maxPerPodContainer=1", slices.Equal(workerLeft, want) && links == 2, "%s", detail)
	for _, p := range append([]*pod{d.w.report}, d.w.web...) {
		left := d.leftovers(after, p)
		add(fmt.Sprintf("deleted Pod %s: containers, sandbox, log directory and log links removed", p.name()), left == "", "%s", orNone(left, "nothing left"))
	}
	var touched []string
	for _, p := range d.w.live() {
		running := p.containers[len(p.containers)-1]
		for _, id := range p.containers {
			if p == d.w.worker && slices.Contains(d.w.workerDead[:workerRestarts-1], id) {
				continue // trimmed, as checked above
			}
			c := after.containers[id]
			switch {
			case c == nil:
				touched = append(touched, p.name()+": container "+shortID(id)+" removed")
			case id == running && c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING:
				touched = append(touched, p.name()+": running container now "+c.GetState().String())
			}
		}
		if sb := after.sandboxes[p.sandboxID]; sb == nil || sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			touched = append(touched, p.name()+": sandbox removed or stopped")
		}
		if !exists(p.logDir(d.node)) {
			touched = append(touched, p.name()+": log directory removed")
		}
		got, err := d.cluster.Client().CoreV1().Pods(p.obj.Namespace).Get(d.ctx(), p.obj.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.obj.UID || got.DeletionTimestamp != nil {
			touched = append(touched, p.name()+": Pod deleted from the API")
		}
	}
	if _, err := d.cluster.Client().CoreV1().Nodes().Get(d.ctx(), nodeName, metav1.GetOptions{}); err != nil {
		touched = append(touched, "Node "+nodeName+": "+err.Error())
	}
	add("live Pods untouched (running containers, sandboxes, log directories, API objects)", len(touched) == 0, "%s",
		orNone(strings.Join(touched, "; "), fmt.Sprintf("%d Pods intact", len(d.w.live()))))

	// Owner GC.
	left := d.apiLeftovers()
	add("the Deployment's ReplicaSet and Pods were collected", left == "", "%s",
		orNone(left, fmt.Sprintf("ReplicaSet %s and 2 Pods gone %v after the Deployment's deletion", d.w.replicaSet.Name, d.cascadeTook.Round(100*time.Millisecond))))
	return out
}

// summary prints the verdict; the demo fails unless every check holds.
func (d *demo) summary() {
	failed := 0
	for _, c := range d.checks {
		if !c.ok {
			failed++
			d.t.Errorf("check failed: %s: %s", c.name, c.detail)
		}
	}
	el := time.Since(d.began).Round(time.Second)
	say("[demo]")
	if failed == 0 {
		say("[demo] PASS: all %d checks hold (disk %d%% → %d%%, %d images removed, owner cascade in %v); demo took %v; tearing down",
			len(d.checks), d.before.usage, d.after.usage, len(d.before.images)-len(d.after.images), d.cascadeTook.Round(100*time.Millisecond), el)
		say("[demo] usage plot: %s", d.plotPath)
		return
	}
	say("[demo] FAIL: %d of %d checks failed (see above); nodegc's log: %s; demo took %v; tearing down", failed, len(d.checks), d.cfg.logPath, el)
}
