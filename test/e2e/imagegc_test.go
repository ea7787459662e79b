//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// The thresholds of deploy/daemonset.yaml's configuration.
const (
	highThreshold = 80.0
	lowThreshold  = 75.0
)

// usage is the image filesystem's usage in percent, as nodegc and the
// kubelet compute it: 100 - available*100/capacity.
func (s *suite) usage(t *testing.T) (pct float64, capacity, available uint64) {
	t.Helper()
	st, err := s.kc.Node.FSStats()
	if err != nil {
		t.Fatal(err)
	}
	return 100 - float64(st.Available)*100/float64(st.Capacity), st.Capacity, st.Available
}

// nodeImages lists the runtime's images by ID.
func (s *suite) nodeImages(t *testing.T) map[string]*runtimeapi.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := s.kc.Node.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*runtimeapi.Image{}
	for _, img := range resp.GetImages() {
		out[img.GetId()] = img
	}
	return out
}

// imageUsers maps image IDs to the running containers' pods using them.
func (s *suite) imageUsers(t *testing.T) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := s.kc.Node.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	users := map[string][]string{}
	for _, c := range resp.GetContainers() {
		pod := c.GetLabels()["io.kubernetes.pod.namespace"] + "/" + c.GetLabels()["io.kubernetes.pod.name"]
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			pod += " (" + strings.ToLower(strings.TrimPrefix(c.GetState().String(), "CONTAINER_")) + ")"
		}
		users[c.GetImageRef()] = append(users[c.GetImageRef()], pod)
	}
	for id := range users {
		sort.Strings(users[id])
		users[id] = compactStrings(users[id])
	}
	return users
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// imageRemovals returns the images nodegc's log says it removed, by ID,
// with the reason.
func (s *suite) imageRemovals(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, r := range s.agentLog(t, s.nodePod, "Removed image") {
		out[r.kv["imageID"]] = r.kv["reason"]
	}
	return out
}

func imageName(img *runtimeapi.Image) string {
	if len(img.GetRepoTags()) > 0 {
		tag := img.GetRepoTags()[0]
		if i := strings.IndexByte(tag, '/'); i >= 0 && strings.HasPrefix(tag, "127.0.0.1:") {
			tag = tag[i+1:] // the registry's host:port says nothing
		}
		return tag
	}
	return shortID(img.GetId())
}

// imageTable logs every image that was on the node at some point of a case:
// what nodegc removed (with the reason from its log) and what it kept, and
// why: keptWhy's answer when it is given, else the pods using it, the
// sandbox image, or not needed.
func (s *suite) imageTable(t *testing.T, title string, before, after map[string]*runtimeapi.Image, users map[string][]string, removals map[string]string,
	keptWhy func(id string) string) (removed []string) {
	ids := make([]string, 0, len(before))
	for id := range before {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return imageName(before[ids[i]]) < imageName(before[ids[j]]) })
	var rows [][]string
	for _, id := range ids {
		img := before[id]
		outcome, why := "kept", "unused and old enough, not needed: the low threshold was reached before its turn (LRU: never used first, then first detected, then ID)"
		switch {
		case after[id] == nil:
			outcome, why = "REMOVED", "nodegc: "+removals[id]
			if removals[id] == "" {
				why = "not in nodegc's log"
			}
			removed = append(removed, id)
		case keptWhy != nil:
			why = keptWhy(id)
		case img.GetPinned() || strings.Contains(imageName(img), registry.PauseRepo+":"):
			why = "pinned sandbox image"
		case len(users[id]) > 0:
			why = "in use: " + strings.Join(users[id], ", ")
		}
		rows = append(rows, []string{imageName(img), shortID(id), mib(float64(img.GetSize())), outcome, why})
	}
	table(t, title, []string{"IMAGE", "ID", "SIZE (CRI)", "OUTCOME", "WHY"}, rows)
	return removed
}

// nodeEvents returns nodegc's Events on the Node with reason.
func (s *suite) nodeEvents(t *testing.T, reason string) []corev1.Event {
	ctx := t.Context()
	evs, err := s.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Node", "involvedObject.name": s.kc.NodeName, "reason": reason,
	}.AsSelector().String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.Source.Component == "nodegc" || e.ReportingController == "nodegc" {
			out = append(out, e)
		}
	}
	return out
}

// testImageGCInUseTooBig: a running pod's image alone takes the image
// filesystem above the high threshold. nodegc cannot free enough (an image in
// use is never removed), reports FreeDiskSpaceFailed on the Node and keeps
// the image; once the pod is deleted, the image is unused and nodegc
// removes it.
func (s *suite) testImageGCInUseTooBig(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "image-gc-hog")
	pct, capacity, avail := s.usage(t)
	if pct >= highThreshold {
		t.Fatalf("image filesystem already at %.1f%%", pct)
	}
	// The image takes its blob plus its unpacked snapshot: twice its size.
	need := int64((highThreshold+5)/100*float64(capacity)) - int64(capacity-avail)
	size := need / 2
	if uint64(need)+capacity/20 > avail {
		t.Fatalf("image filesystem too small for the case: %s available, need %s", mib(float64(avail)), mib(float64(need)))
	}
	hog, err := s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "e2e/hog", Layers: []registry.LayerSpec{{Seed: "hog", Size: size}}})
	if err != nil {
		t.Fatal(err)
	}
	before := s.nodeMetrics(t)
	imagesBefore := s.nodeImages(t)
	began := time.Now()
	if _, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: ns}, Spec: podSpec(hog.Ref)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPod(t, ns, "hog", 3*time.Minute, "Running", podReady)
	pctHog, _, _ := s.usage(t)
	t.Logf("pod %s/hog Running with %s (%s): image filesystem %.1f%% -> %.1f%% (high threshold %.0f%%)", ns, hog.Ref, mib(float64(size)), pct, pctHog, highThreshold)

	var evs []corev1.Event
	if err := poll(ctx, 2*time.Minute, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		evs = nil
		for _, e := range s.nodeEvents(t, "FreeDiskSpaceFailed") {
			if !e.LastTimestamp.Time.Before(began.Add(-time.Second)) || !e.EventTime.Time.Before(began.Add(-time.Second)) {
				evs = append(evs, e)
			}
		}
		return len(evs) > 0, nil
	}); err != nil {
		t.Fatalf("no FreeDiskSpaceFailed Event from nodegc on Node %s: %v", s.kc.NodeName, err)
	}
	usersHog := s.imageUsers(t)
	atFailure := s.nodeImages(t)
	if atFailure[hog.ID()] == nil {
		t.Fatalf("nodegc removed %s, used by a running pod", hog.Ref)
	}
	mid := s.nodeMetrics(t)
	// The pull fills the disk fast: the run may be started by the fill
	// rate (trigger projected) before usage reaches the high threshold.
	notEnough := mid.sum("nodegc_image_gc_runs_total", "result", "not_enough") - before.sum("nodegc_image_gc_runs_total", "result", "not_enough")
	t.Logf("Event on Node %s: %s %s (count %d): %s; nodegc_image_gc_runs_total{result=not_enough} +%v (%s), nodegc_image_gc_images_skipped{reason=in_use} %v",
		s.kc.NodeName, evs[0].Type, evs[0].Reason, evs[0].Count, evs[0].Message, notEnough, runsDelta(before, mid), mid.sum("nodegc_image_gc_images_skipped", "reason", "in_use"))
	if notEnough < 1 {
		t.Errorf("nodegc_image_gc_runs_total{result=not_enough} did not grow")
	}

	// The pod goes: its image is unused now, and nodegc removes it.
	deleted := time.Now()
	if err := s.client.CoreV1().Pods(ns).Delete(ctx, "hog", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPodGone(t, ns, "hog", time.Minute)
	if err := poll(ctx, 3*time.Minute, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		st, err := s.kc.Node.Images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: hog.ID()}})
		return err == nil && st.GetImage() == nil, nil
	}); err != nil {
		t.Fatalf("%s not removed after its pod was deleted: %v", hog.Ref, err)
	}
	// containerd frees the content and snapshots after the image record.
	var pctAfter float64
	if err := poll(ctx, time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		pctAfter, _, _ = s.usage(t)
		return pctAfter <= lowThreshold, nil
	}); err != nil {
		t.Errorf("image filesystem at %.1f%% after the hog image went, want at most %.0f%%", pctAfter, lowThreshold)
	}
	// The run that removed the hog image is the only one writing to the
	// filesystem's available bytes (no pull runs beside it), so what it
	// measured is the image: at least its blob (size), with its unpacked
	// snapshot about twice that. It is counted when the run ends, after
	// containerd's cleanup settled.
	var measured float64
	if err := poll(ctx, 45*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		measured = s.nodeMetrics(t).sum("nodegc_image_gc_bytes_measured_freed_total") - mid.sum("nodegc_image_gc_bytes_measured_freed_total")
		return measured >= float64(size), nil
	}); err != nil {
		t.Errorf("nodegc_image_gc_bytes_measured_freed_total grew by %s after the hog image (%s) was removed, want at least its size: %v", mib(measured), mib(float64(size)), err)
	}
	removals := s.imageRemovals(t)
	s.imageTable(t, fmt.Sprintf("image GC, in-use image too big to free: while pod %s/hog ran (%.1f%%), nodegc kept its image and reported FreeDiskSpaceFailed; %v after the pod was deleted the image was removed (%.1f%% now, nodegc_image_gc_bytes_measured_freed_total +%s). Images at the failure:",
		ns, pctHog, time.Since(deleted).Round(time.Millisecond), pctAfter, mib(measured)), atFailure, atFailure, usersHog, removals, nil)
	final := s.nodeImages(t)
	s.imageTable(t, "... and after the pod was deleted:", mergeImages(imagesBefore, atFailure), final, s.imageUsers(t), removals, nil)
	if removals[hog.ID()] != "space" {
		t.Errorf("nodegc's log has reason %q for %s, want space", removals[hog.ID()], hog.Ref)
	}
}

func mergeImages(ms ...map[string]*runtimeapi.Image) map[string]*runtimeapi.Image {
	out := map[string]*runtimeapi.Image{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// testImageGCThreshold: images pulled through CRI that no pod uses, back to
// back, would fill the image filesystem above the high threshold; nodegc
// brings it to the low threshold or below (or, having met the burst with
// projected runs only, under the high threshold with no run called for), removing
// only unused images, while the images of running pods (the test's web
// pod, the other cases' pods, nodegc's own) and the sandbox image stay.
func (s *suite) testImageGCThreshold(t *testing.T) {
	ctx := t.Context()
	ns := s.namespace(t, "image-gc")
	web, err := s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "e2e/web", Layers: []registry.LayerSpec{{Seed: "web", Size: 16 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: podSpec(web.Ref)}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPod(t, ns, "web", 2*time.Minute, "Running", podReady)

	// A burst of unused images pulled back to back takes the image
	// filesystem over the high threshold (to about high + 7% if nothing
	// reclaimed). nodegc reacts during the burst already: the fill rate
	// (trigger projected) or the crossing (trigger threshold) starts it.
	// The images are pushed to the registry first, so that the burst is
	// pulls only, and their number is fixed: the fill cannot chase nodegc.
	pct0, capacity, avail0 := s.usage(t)
	need := int64((highThreshold+7)/100*float64(capacity)) - int64(capacity-avail0) // on disk: blob + snapshot
	const perImage = 0.06                                                           // of the disk each
	n := int(math.Ceil(float64(need) / (perImage * float64(capacity))))
	fillerSize := need / 2 / int64(n)
	var pulled []*registry.Image
	for i := range n {
		repo := fmt.Sprintf("e2e/filler-%02d", i)
		img, err := s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: repo, Layers: []registry.LayerSpec{{Seed: repo, Size: fillerSize}}})
		if err != nil {
			t.Fatal(err)
		}
		pulled = append(pulled, img)
	}
	before := s.nodeMetrics(t)
	imagesBefore := s.nodeImages(t)
	usersBefore := s.imageUsers(t)
	crossed := time.Now()
	pctPeak := pct0
	for _, img := range pulled {
		if _, err := s.kc.Node.PullImage(ctx, img.Ref); err != nil {
			t.Fatal(err)
		}
		pct, _, _ := s.usage(t)
		pctPeak = max(pctPeak, pct)
		imagesBefore = mergeImages(imagesBefore, s.nodeImages(t)) // nodegc may remove one before the burst ends
	}
	burst := time.Since(crossed)
	t.Logf("image filesystem %.1f%% with pod %s/web Running; %d unused images (%s each) pulled through CRI back to back in %v (%.1f%% if nothing reclaimed): peak %.1f%% seen after a pull (high %.0f%%, low %.0f%%)",
		pct0, ns, n, mib(float64(fillerSize)), burst.Round(time.Millisecond), pct0+float64(need)*100/float64(capacity), pctPeak, highThreshold, lowThreshold)

	// Done when usage is at or under the low threshold. Once usage reached
	// the high threshold (a run with trigger threshold), nodegc collects
	// down to the low one, even when pulls beside a run left usage between
	// the thresholds. Only when projected runs alone met the burst (each
	// planning down to the low threshold with what had arrived, and usage
	// never reached high) may the pulls beside the last run leave usage
	// between the thresholds, which calls for no run (for the kubelet
	// neither): then done 15 s after the last run.
	var pctNow float64
	var kept string
	thresholdRuns := func(m metrics) float64 { return m.sum("nodegc_image_gc_runs_total", "trigger", "threshold") }
	lastRuns, quietSince := s.nodeMetrics(t).sum("nodegc_image_gc_runs_total"), time.Now()
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		pctNow, _, _ = s.usage(t)
		if pctNow <= lowThreshold {
			return true, nil
		}
		now := s.nodeMetrics(t)
		if n := now.sum("nodegc_image_gc_runs_total"); n != lastRuns {
			lastRuns, quietSince = n, time.Now()
		}
		if pctNow < highThreshold && time.Since(quietSince) > 15*time.Second && thresholdRuns(now) == thresholdRuns(before) {
			kept = fmt.Sprintf("; the projected runs during the burst left %.1f%%, between the thresholds: no run called for", pctNow)
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("image filesystem still at %.1f%%, want at most %.0f%% (or, with projected runs only, under %.0f%% with no run for 15 s): %v; nodegc's image GC log, last lines: %s",
			pctNow, lowThreshold, highThreshold, err, s.agentLogTail(t, s.nodePod, "node-gc.image-gc", 8))
	}
	reacted := time.Since(crossed)
	// Let the runs finish before reading the counters: a run counts its
	// removals when it ends, after measuring the freed bytes once
	// containerd's asynchronous cleanup settled. The measured bytes are
	// reported, not checked: a run that starts during the burst measures
	// the pulls that go on beside it too (the net change can be negative,
	// counted as 0). ImageGCInUseTooBig checks them on a run alone.
	imagesAfter := s.nodeImages(t)
	gone := 0
	for id := range imagesBefore {
		if imagesAfter[id] == nil {
			gone++
		}
	}
	var after metrics
	if err := poll(ctx, 45*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		after = s.nodeMetrics(t)
		return after.sum("nodegc_image_gc_images_removed_total", "reason", "space")-before.sum("nodegc_image_gc_images_removed_total", "reason", "space") >= float64(gone), nil
	}); err != nil {
		t.Errorf("nodegc_image_gc_images_removed_total{reason=space} grew by less than the %d images gone from the node: %v", gone, err)
	}
	removals := s.imageRemovals(t)
	delta := func(metric string, kv ...string) float64 { return after.sum(metric, kv...) - before.sum(metric, kv...) }
	removed := s.imageTable(t, fmt.Sprintf("image GC of a burst of unused images (%.1f%% if nothing reclaimed): peak %.1f%% -> %.1f%% within %v of the burst's start%s; runs %s; nodegc_image_gc_images_removed_total{reason=space} +%v, bytes targeted +%s, estimated freed +%s, measured freed +%s",
		pct0+float64(need)*100/float64(capacity), pctPeak, pctNow, reacted.Round(time.Millisecond), kept, runsDelta(before, after), delta("nodegc_image_gc_images_removed_total", "reason", "space"),
		mib(delta("nodegc_image_gc_bytes_targeted_total")), mib(delta("nodegc_image_gc_bytes_estimated_freed_total")), mib(delta("nodegc_image_gc_bytes_measured_freed_total"))),
		imagesBefore, imagesAfter, usersBefore, removals, nil)

	if len(removed) == 0 {
		t.Fatalf("no image removed")
	}
	for _, id := range removed {
		if len(usersBefore[id]) > 0 {
			t.Errorf("nodegc removed image %s used by %v", shortID(id), usersBefore[id])
		}
		if removals[id] != "space" {
			t.Errorf("image %s: nodegc's log has reason %q, want space", shortID(id), removals[id])
		}
	}
	for _, must := range []struct{ what, id string }{
		{"web (pod " + ns + "/web)", web.ID()},
		{"nodegc (its own DaemonSet and Deployment)", s.imageID},
		{"e2e/sleep (pods of the other cases)", s.sleepImage.ID()},
		{"pause (sandbox image)", s.kc.Node.Pause.ID()},
	} {
		if imagesAfter[must.id] == nil {
			t.Errorf("image %s was removed", must.what)
		}
	}
}
