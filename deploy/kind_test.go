package deploy

import (
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodegc/nodegc/internal/testbed"
)

// makeImageTags runs the image step of `make image` as the Makefile has it
// (make -n image, its hack/image command, on a stand-in binary: the image's
// tags do not depend on it) with VERSION set, and returns the tags of the
// tarball it writes, and the make -n output with the Makefile's own OUT.
func makeImageTags(t *testing.T, version string) (tags []string, defaultRecipe string) {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	makeN := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "make", append([]string{"-n", "image"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n image %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := t.TempDir()
	var step string
	for _, line := range strings.Split(makeN("VERSION="+version, "OUT="+out), "\n") {
		if strings.Contains(line, "./hack/image") {
			step = line
		}
	}
	if step == "" {
		t.Fatal("make -n image runs no ./hack/image")
	}
	bin := filepath.Join(out, "bin", "nodegc")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte("a stand-in for nodegc\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", step)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", step, err, b)
	}
	tarPath := filepath.Join(out, "image", "nodegc.tar")
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarPath) })
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
	}
	return tags, makeN()
}

// TestChartKindPreset: the kind preset's quick-start works as its header
// says (make image && kind load image-archive _output/image/nodegc.tar,
// then helm install with the preset): the image both workloads run, never
// pulled (pullPolicy Never), is one of the tags of the tarball make image
// writes, also on a dirty tree; the tarball is where the header loads it
// from. Its configuration is kind's kubelets' (their disk management off:
// imageGCHighThresholdPercent 100, evictionHard 0%): nodegc's threshold
// image GC off and no age limit, so that images loaded with kind load and
// not run yet stay at a laptop's usual disk usage (pullPolicy Never cannot
// pull them again). And ownerGC.mode is off, as kind runs
// kube-controller-manager's collector; deployment, as the preset says for
// a cluster made with it off, runs the loaded image too.
func TestChartKindPreset(t *testing.T) {
	tags, recipe := makeImageTags(t, "v0.1.0-2-gabcdef0-dirty")
	if !strings.Contains(recipe, "--out _output/image") || !strings.Contains(repoFile(t, "deploy/helm/nodegc/presets/kind.yaml"), "kind load image-archive _output/image/nodegc.tar") {
		t.Errorf("the kind preset's header does not load the tarball make image writes (make -n image:\n%s)", recipe)
	}
	check := func(t *testing.T, o *unstructured.Unstructured) {
		t.Helper()
		ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := ctrs[0].(map[string]any)
		if !slices.Contains(tags, c["image"].(string)) {
			t.Errorf("%s %s runs %v, which make image's tarball does not carry (its tags: %v): ErrImageNeverPull on every node", o.GetKind(), o.GetName(), c["image"], tags)
		}
		if c["imagePullPolicy"] != "Never" {
			t.Errorf("%s %s imagePullPolicy %v, want Never (the image is loaded with kind load)", o.GetKind(), o.GetName(), c["imagePullPolicy"])
		}
	}

	objs := render(t, "nodegc", "-f", presetFile("kind"))
	ds := find(objs, "DaemonSet", "nodegc-node")
	if ds == nil {
		t.Fatal("no DaemonSet nodegc-node")
	}
	check(t, ds)
	if args := containerArgs(t, ds); args[len(args)-1] != "--owner-gc=off" {
		t.Errorf("DaemonSet args %v, want the last --owner-gc=off", args)
	}
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			t.Errorf("Deployment %s rendered: kind runs kube-controller-manager's garbage collector, the preset's ownerGC.mode is off", o.GetName())
		}
	}
	ig := renderedConfig(t, objs).ImageGC
	if *ig.HighThresholdPercent != 100 || ig.MaximumGCAge.Duration != 0 {
		t.Errorf("imageGC highThresholdPercent %d, maximumGCAge %v: want 100 and 0 (kind's kubelets' image GC is off, and loaded images cannot be pulled again)", *ig.HighThresholdPercent, ig.MaximumGCAge.Duration)
	}
	want := map[string]string{"imagefs.available": "0%", "nodefs.available": "0%"}
	if !maps.Equal(ig.EvictionHard, want) {
		t.Errorf("imageGC.evictionHard %v, want kind's kubelets' %v", ig.EvictionHard, want)
	}

	dep := find(render(t, "nodegc", "-f", presetFile("kind"), "--set", "ownerGC.mode=deployment"), "Deployment", "nodegc-owner")
	if dep == nil {
		t.Fatal("ownerGC.mode deployment: no Deployment nodegc-owner")
	}
	check(t, dep)
}
