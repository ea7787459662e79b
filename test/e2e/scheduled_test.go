//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// scheduledHold is how long the init container of the scheduled pod runs
// before its app container may start.
const scheduledHold = 60 * time.Second

// planImage is one image row of `nodegc plan -o json`.
type planImage struct {
	Action string   `json:"action"`
	Reason string   `json:"reason"`
	Bytes  uint64   `json:"bytes"`
	ID     string   `json:"id"`
	Tags   []string `json:"tags"`
}

// agentPlan runs `nodegc plan -o json` in the DaemonSet pod's container
// through CRI (as `kubectl exec` would: the Node has no reachable address
// here) and returns its image rows by ID and its pods view.
func (s *suite) agentPlan(t *testing.T) (map[string]planImage, string) {
	t.Helper()
	p, err := s.client.CoreV1().Pods(s.nodePod.Namespace).Get(t.Context(), s.nodePod.Name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("DaemonSet pod %s: %v %s", s.nodePod.Name, err, describePod(p))
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	resp, err := s.kc.Node.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{
		ContainerId: id, Cmd: []string{"/nodegc", "plan", "-c", "/etc/nodegc/config.yaml", "-o", "json"}, Timeout: 50,
	})
	if err != nil {
		t.Fatalf("nodegc plan in %s: %v", s.nodePod.Name, err)
	}
	// Exit 2: the container plan alone is missing; the image plan is what
	// is read here (imagesError below).
	if code := resp.GetExitCode(); code != 0 && code != 2 {
		t.Fatalf("nodegc plan in %s: exit %d\n%s\n%s", s.nodePod.Name, resp.GetExitCode(), resp.GetStdout(), resp.GetStderr())
	}
	var out struct {
		Images    []planImage `json:"images"`
		ImagesErr string      `json:"imagesError"`
		PodsView  string      `json:"podsView"`
	}
	if err := json.Unmarshal(resp.GetStdout(), &out); err != nil {
		t.Fatalf("nodegc plan -o json: %v\n%s", err, resp.GetStdout())
	}
	if out.ImagesErr != "" {
		t.Fatalf("nodegc plan: images: %s", out.ImagesErr)
	}
	rows := map[string]planImage{}
	for _, r := range out.Images {
		rows[r.ID] = r
	}
	return rows, out.PodsView
}

// testScheduledImageKept: a pod whose app image is on the node but whose
// app container has not started (its init container runs for a minute;
// imagePullPolicy Never) keeps that image through an image GC run that
// removes every other unused image. The image is sized so that the node
// sits between the low and the high threshold with it: unused images pulled
// on top take usage over the high threshold, and the run needs more than
// all of them, so it removes them all and then would have removed the
// scheduled image, first in LRU order (never used, oldest). nodegc's plan
// and /metrics name the keep reason scheduled; when the init container
// ends, the app container starts from the image, no pull needed.
func (s *suite) testScheduledImageKept(t *testing.T) {
	ctx := t.Context()
	s.removeUnusedImages(t, "left by earlier cases")
	ns := s.namespace(t, "scheduled")
	pct0, capacity, _ := s.usage(t)
	target := (highThreshold + lowThreshold) / 2 // with the scheduled image
	if pct0 > lowThreshold-5 {
		t.Fatalf("image filesystem at %.1f%% before the case: no room for the scheduled image", pct0)
	}
	appSize := int64((target - pct0) / 100 * float64(capacity) / 2)
	app, err := s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "e2e/scheduled-app", Layers: []registry.LayerSpec{{Seed: "scheduled-app", Size: appSize}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := podSpec(app.Ref)
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	spec.RestartPolicy = corev1.RestartPolicyNever
	spec.InitContainers = []corev1.Container{{Name: "hold", Image: s.sleepImage.Ref, Args: []string{"exit", "0", scheduledHold.String()}}}
	if _, err := s.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: ns}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	initRunning := func(p *corev1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].State.Running != nil
	}
	s.waitPod(t, ns, "held", time.Minute, "with its init container running", initRunning)
	holdStarted := time.Now()
	// The app image arrives while the pod waits for its init container, as
	// a pre-pull (or an earlier pod) would bring it.
	if _, err := s.kc.Node.PullImage(ctx, app.Ref); err != nil {
		t.Fatal(err)
	}
	pctApp, _, _ := s.usage(t)

	imagesBefore := s.nodeImages(t)
	usersBefore := s.imageUsers(t)
	before := s.nodeMetrics(t)
	// Unused images on top, over the high threshold; the run needs to free
	// more than they hold.
	fillerSize := int64((highThreshold + 4 - pctApp) / 100 * float64(capacity) / 2 / 2)
	var fillers []*registry.Image
	for i := range 2 {
		repo := fmt.Sprintf("e2e/scheduled-filler-%d", i)
		img, err := s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: repo, Layers: []registry.LayerSpec{{Seed: repo, Size: fillerSize}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.kc.Node.PullImage(ctx, img.Ref); err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, img)
		// nodegc may remove it before the next one arrives.
		imagesBefore = mergeImages(imagesBefore, s.nodeImages(t))
	}
	filled := time.Now()
	pctPeak, _, _ := s.usage(t)
	t.Logf("pod %s/held: init container running (%v), app image %s (%s) pulled through CRI: image filesystem %.1f%% -> %.1f%%; 2 unused images (%s each) on top: %.1f%% (high %.0f%%, low %.0f%%)",
		ns, scheduledHold, app.Ref, mib(float64(appSize)), pct0, pctApp, mib(float64(fillerSize)), pctPeak, highThreshold, lowThreshold)

	// nodegc's run removes every unused image but the scheduled one.
	var left []string
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		now := s.nodeImages(t)
		left = left[:0]
		for _, f := range fillers {
			if now[f.ID()] != nil {
				left = append(left, f.Repo)
			}
		}
		return len(left) == 0, nil
	}); err != nil {
		t.Fatalf("unused images %v not removed by nodegc: %v; nodegc's image GC log, last lines: %s", left, err, s.agentLogTail(t, s.nodePod, "node-gc.image-gc", 8))
	}
	removedAfter := time.Since(filled)
	imagesAfter := s.nodeImages(t)
	if imagesAfter[app.ID()] == nil {
		t.Fatalf("nodegc removed %s, the image of pod %s/held whose app container has not started", app.Ref, ns)
	}
	// Let the run end (its counters), then ask nodegc's plan.
	var mid metrics
	if err := poll(ctx, 30*time.Second, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		mid = s.nodeMetrics(t)
		return mid.sum("nodegc_image_gc_images_skipped", "reason", "scheduled") >= 1, nil
	}); err != nil {
		t.Errorf("nodegc_image_gc_images_skipped{reason=scheduled} stayed %v: %v", mid.sum("nodegc_image_gc_images_skipped", "reason", "scheduled"), err)
	}
	plan, podsView := s.agentPlan(t)
	pctPlan, _, _ := s.usage(t)
	removals := s.imageRemovals(t)
	delta := func(metric string, kv ...string) float64 { return mid.sum(metric, kv...) - before.sum(metric, kv...) }
	var runs []string
	for _, trig := range []string{"threshold", "projected", "periodic"} {
		for _, res := range []string{"success", "not_enough", "error"} {
			if d := delta("nodegc_image_gc_runs_total", "trigger", trig, "result", res); d > 0 {
				runs = append(runs, fmt.Sprintf("%s/%s +%v", trig, res, d))
			}
		}
	}

	s.imageTable(t, fmt.Sprintf("image GC with a scheduled image: %.1f%% -> %.1f%%, every unused image removed within %v of the last one's pull, the scheduled one kept; runs %s, nodegc_image_gc_images_skipped{reason=scheduled} %v; nodegc plan (pods view %q) at %.1f%%:",
		pctPeak, pctPlan, removedAfter.Round(time.Millisecond), strings.Join(runs, ", "), mid.sum("nodegc_image_gc_images_skipped", "reason", "scheduled"), podsView, pctPlan),
		imagesBefore, imagesAfter, usersBefore, removals, func(id string) string {
			why := "nodegc plan: " + plan[id].Action + " (" + plan[id].Reason + ")"
			switch {
			case id == app.ID():
				why += ": pod " + ns + "/held, init container running, app container not started"
			case len(usersBefore[id]) > 0:
				why += ": " + strings.Join(usersBefore[id], ", ")
			}
			return why
		})
	if r := plan[app.ID()]; r.Action != "keep" || r.Reason != "scheduled" {
		t.Errorf("nodegc plan: %s is %q (%q), want keep (scheduled)", app.Ref, r.Action, r.Reason)
	}
	for _, f := range fillers {
		if removals[f.ID()] != "space" {
			t.Errorf("image %s: nodegc's log has reason %q, want space", f.Repo, removals[f.ID()])
		}
	}

	// The init container ends; the app container starts from the image on
	// the node (imagePullPolicy Never: no pull could have replaced it).
	p := s.waitPod(t, ns, "held", scheduledHold+time.Minute, "Running its app container", func(p *corev1.Pod) bool {
		return podReady(p) || (len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImageNeverPull")
	})
	if !podReady(p) {
		t.Fatalf("pod %s/held: app container cannot start: %s", ns, describePod(p))
	}
	cs := p.Status.ContainerStatuses[0]
	if !strings.Contains(cs.ImageID, strings.TrimPrefix(app.ManifestDigest, "sha256:")) {
		t.Errorf("pod %s/held runs image %s, want %s", ns, cs.ImageID, app.RepoDigest())
	}
	t.Logf("pod %s/held: init container done, app container started %v after the init container did, from the kept image %s (imagePullPolicy Never)",
		ns, time.Since(holdStarted).Round(time.Millisecond), shortID(app.ID()))

	// Clean up: the pod goes, and its image with it.
	if err := s.client.CoreV1().Pods(ns).Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitPodGone(t, ns, "held", time.Minute)
	if err := poll(ctx, time.Minute, 250*time.Millisecond, func(context.Context) (bool, error) {
		return len(s.imageUsers(t)[app.ID()]) == 0, nil
	}); err != nil {
		t.Logf("a container of the deleted pod still names %s: %v", app.Ref, err)
	}
	s.removeUnusedImages(t, "this case's")
}
