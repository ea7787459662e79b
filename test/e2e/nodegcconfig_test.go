//go:build e2e

package e2e

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
)

// reconfigureNodegc puts data in the ConfigMap nodegc-config as
// config.yaml, deletes the DaemonSet's pod and waits for its replacement
// (which reads the new file) to be Running and Ready with /metrics
// answering; s.nodePod is the new pod. The returned func puts the previous
// configuration back the same way.
func (s *suite) reconfigureNodegc(t *testing.T, what, data string) (restore func()) {
	t.Helper()
	prev := s.applyNodegcConfig(t, data)
	t.Logf("nodegc reconfigured (%s); DaemonSet pod now %s", what, s.nodePod.Name)
	return func() {
		s.applyNodegcConfig(t, prev)
		t.Logf("nodegc configuration restored; DaemonSet pod now %s", s.nodePod.Name)
	}
}

func (s *suite) applyNodegcConfig(t *testing.T, data string) (prev string) {
	t.Helper()
	ctx := t.Context()
	cms := s.client.CoreV1().ConfigMaps("nodegc")
	cm, err := cms.Get(ctx, "nodegc-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prev = cm.Data["config.yaml"]
	cm.Data["config.yaml"] = data
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := s.nodePod
	began := time.Now()
	if err := s.client.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	err = poll(ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := s.client.CoreV1().Pods("nodegc").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil {
			return false, nil
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.UID != old.UID && p.DeletionTimestamp == nil {
				last = p
				return podReady(p), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet pod replacing %s not Running and Ready: %v: %s", old.Name, err, describePod(last))
	}
	s.nodePod = last
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		m, err := scrape(ctx, s.metricsPort)
		return err == nil && m.has("nodegc_image_fs_capacity_bytes"), nil
	}); err != nil {
		t.Fatalf("/metrics of the new DaemonSet pod %s: %v", last.Name, err)
	}
	t.Logf("DaemonSet pod %s replaced by %s, Ready with /metrics in %v", old.Name, last.Name, time.Since(began).Round(time.Millisecond))
	return prev
}

// nodegcConfigBeside is the e2e configuration for run (b) of the disk
// pressure comparison: the NodeGCConfiguration document with
// highThresholdPercent 80 and lowThresholdPercent 75 (under the kubelet's
// eviction point), minimumGCAge, diskCheckInterval and fillRateHorizon
// unset, followed by the kubelet's own KubeletConfiguration file as a
// second document. nodegc takes from it what its document leaves unset
// (evictionHard, imageMinimumGCAge); the configuration is decoded and
// validated here and must have taken both.
func (s *suite) nodegcConfigBeside(t *testing.T, kubeletConfigPath string) string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(s.nodegcConfig), &doc); err != nil {
		t.Fatal(err)
	}
	ig := doc["imageGC"].(map[string]any)
	ig["highThresholdPercent"] = dpNodegcHigh
	ig["lowThresholdPercent"] = dpNodegcLow
	delete(ig, "minimumGCAge")
	delete(ig, "diskCheckInterval")
	delete(ig, "fillRateHorizon")
	delete(ig, "evictionHard")
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := os.ReadFile(kubeletConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	data := string(out) + "---\n# The node's KubeletConfiguration (" + kubeletConfigPath + "), as the kubelet runs with it.\n" + string(kubelet)
	loaded, err := config.Decode([]byte(data))
	if err != nil {
		t.Fatalf("nodegc's configuration with the KubeletConfiguration: %v\n%s", err, data)
	}
	if errs := config.Validate(loaded.Config); len(errs) > 0 {
		t.Fatalf("nodegc's configuration with the KubeletConfiguration: %v", errs.ToAggregate())
	}
	ic := loaded.Config.ImageGC
	for _, p := range []string{"imageGC.evictionHard", "imageGC.minimumGCAge"} {
		if !slices.Contains(loaded.FromKubelet, p) {
			t.Fatalf("nodegc did not take %s from the KubeletConfiguration (took %v)", p, loaded.FromKubelet)
		}
	}
	if !maps.Equal(ic.EvictionHard, dpEvictionHard()) || ic.MinimumGCAge.Duration != dpMinAge {
		t.Fatalf("nodegc's configuration: evictionHard %v minimumGCAge %v, want %v and %v", ic.EvictionHard, ic.MinimumGCAge.Duration, dpEvictionHard(), dpMinAge)
	}
	t.Logf("nodegc configuration for run (b): imageGC high %d low %d, diskCheckInterval %v, fillRateHorizon %v; from the KubeletConfiguration: %s (evictionHard %v, minimumGCAge %v); warnings: %v",
		*ic.HighThresholdPercent, *ic.LowThresholdPercent, ic.DiskCheckInterval.Duration, ic.FillRateHorizon.Duration, strings.Join(loaded.FromKubelet, ", "),
		ic.EvictionHard, ic.MinimumGCAge.Duration, loaded.Warnings)
	return data
}

// removeImage removes an image through CRI.
func (s *suite) removeImage(t *testing.T, id string) error {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := s.kc.Node.Images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}})
	return err
}

// removeUnusedImages removes, through CRI, the images no container uses
// and the suite does not need again (not the sandbox image, nodegc's,
// e2e/sleep or e2e/crash), so that a case starts from the node's base usage
// and leaves it there. It logs what it removed, whose they were.
func (s *suite) removeUnusedImages(t *testing.T, whose string) {
	t.Helper()
	users := s.imageUsers(t)
	keep := map[string]bool{s.imageID: true, s.sleepImage.ID(): true, s.crashImage.ID(): true, s.kc.Node.Pause.ID(): true}
	var removed []string
	for id, img := range s.nodeImages(t) {
		if keep[id] || len(users[id]) > 0 || img.GetPinned() || strings.Contains(imageName(img), registry.PauseRepo+":") {
			continue
		}
		if err := s.removeImage(t, id); err != nil {
			t.Fatalf("remove image %s: %v", imageName(img), err)
		}
		removed = append(removed, imageName(img))
	}
	slices.Sort(removed)
	// containerd frees content and snapshots a moment after the image.
	var pct float64
	poll(t.Context(), 10*time.Second, 200*time.Millisecond, func(context.Context) (bool, error) {
		prev := pct
		pct, _, _ = s.usage(t)
		return prev == pct, nil
	})
	t.Logf("removed %d unused images (%s) through CRI: %s; image filesystem at %.1f%%", len(removed), whose, strings.Join(removed, ", "), pct)
}
