//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// The tuned timings of the e2e configuration (see adaptForTestNode).
const (
	e2eContainerGCPeriod = "2s"
	e2eImageMinimumGCAge = "0s"
)

// imageTarball returns the image `make image` built.
func imageTarball(t testing.TB) string {
	t.Helper()
	p := os.Getenv("NODEGC_E2E_IMAGE_TAR")
	if p == "" {
		root, err := testbed.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(root, "_output", "image", "nodegc.tar")
	}
	_, err := os.Stat(p)
	testbed.Require(t, err == nil, fmt.Sprintf("nodegc image %s not found: run hack/e2e.sh (or `make image` first)", p))
	return p
}

// pushImage pushes the image tarball to the node's registry as
// nodegc:e2e and returns the reference.
func (s *suite) pushImage(t *testing.T, tarPath string) {
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		t.Fatalf("read %s: %v", tarPath, err)
	}
	ref := s.kc.Node.Registry.Host + "/nodegc:e2e"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	s.image, s.imageID = ref, cfg.String()
}

// renderForNode renders deploy/daemonset.yaml with hack/render-deploy.sh
// for this node: the pushed image, the node's runtime socket, containerd
// root and pod logs directory, a state directory in the node's directory,
// and free ports.
func (s *suite) renderForNode(t *testing.T) []*unstructured.Unstructured {
	n := s.kc.Node
	s.stateDir = filepath.Join(n.Dir, "nodegc-state")
	ports, err := testbed.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	s.healthzPort, s.metricsPort, s.ownerHealthzPort, s.ownerMetricsPort = ports[0], ports[1], ports[2], ports[3]
	env := map[string]string{
		"NODEGC_RUNTIME_SOCKET":  n.Socket,
		"NODEGC_CONTAINERD_ROOT": n.Root,
		"NODEGC_POD_LOGS_DIR":    s.kc.PodLogsDir,
		// The kubelet's container log links are at /var/log/containers
		// whatever its config says: no override.
		"NODEGC_STATE_DIR":    s.stateDir,
		"NODEGC_HEALTHZ_PORT": strconv.Itoa(s.healthzPort),
		"NODEGC_METRICS_PORT": strconv.Itoa(s.metricsPort),
	}
	var desc []string
	for k, v := range env {
		desc = append(desc, k+"="+v)
	}
	_, objs := renderManifest(t, s.image, env)
	t.Logf("rendered deploy/daemonset.yaml with hack/render-deploy.sh %s (%s): %d objects", s.image, strings.Join(desc, " "), len(objs))
	return objs
}

// adaptForTestNode makes what the test cluster lacks unnecessary, and
// tunes timings so the suite takes minutes, not hours. Each change is
// logged. The test cluster has no kube-proxy and no pod network (hostNetwork
// pods only, nothing but loopback traffic):
//
//   - Both workloads: KUBERNETES_SERVICE_HOST=127.0.0.1 and
//     KUBERNETES_SERVICE_PORT=<kube-apiserver's port>, as clusters without
//     kube-proxy set them: the kubernetes Service's ClusterIP is not routed
//     here, kube-apiserver listens on loopback. In-cluster configuration
//     (ServiceAccount token and CA) is used as in any cluster.
//   - The owner collector Deployment: hostNetwork (no pod network to reach
//     the API from), its own ports (the DaemonSet's are taken on this one
//     node: --metrics-bind-address/--healthz-bind-address and its
//     containerPorts), and 1 replica (a second one would need the same host
//     ports on the same node and stay Pending).
//   - The ConfigMap's configuration: imageGC.minimumGCAge 0s (2m: the suite
//     pulls images and wants them eligible at once) and containerGC.period
//     2s (1m), so each check takes seconds; imageGC.diskCheckInterval stays
//     the manifest's 1s.
//   - The DaemonSet's agent logs at -v=4, where nodegc logs every removal
//     with its reason; the report quotes them.
func (s *suite) adaptForTestNode(t *testing.T, objs []*unstructured.Unstructured) {
	tuned, changes, err := s.adaptation().apply(objs)
	if err != nil {
		t.Fatalf("adapting the manifest for the test node: %v", err)
	}
	s.nodegcConfig = tuned
	t.Logf("adapted for the test node (no kube-proxy, no pod network; faster timings):\n  %s", strings.Join(changes, "\n  "))
}

// adaptation is what adaptForTestNode needs to know about the test node.
// The helm install case hands it to the post-renderer (the test binary
// itself, see TestMain) as JSON.
type adaptation struct {
	APIServerPort    int `json:"apiServerPort"`
	OwnerHealthzPort int `json:"ownerHealthzPort"`
	OwnerMetricsPort int `json:"ownerMetricsPort"`
}

func (s *suite) adaptation() adaptation {
	return adaptation{APIServerPort: s.kc.API.APIServerPort, OwnerHealthzPort: s.ownerHealthzPort, OwnerMetricsPort: s.ownerMetricsPort}
}

// apply makes the changes adaptForTestNode describes to objs, in place, and
// returns the tuned configuration and what it changed. The ConfigMap
// nodegc-config, the DaemonSet nodegc-node and the Deployment nodegc-owner
// must all be there.
func (a adaptation) apply(objs []*unstructured.Unstructured) (tunedConfig string, changes []string, err error) {
	apiEnv := []any{
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(a.APIServerPort)},
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == "nodegc-config":
			data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			if tunedConfig, err = tuneConfig(data); err != nil {
				return "", nil, fmt.Errorf("tune the configuration: %w", err)
			}
			if err := unstructured.SetNestedField(o.Object, tunedConfig, "data", "config.yaml"); err != nil {
				return "", nil, err
			}
			changes = append(changes, "ConfigMap: imageGC.minimumGCAge "+e2eImageMinimumGCAge+", containerGC.period "+e2eContainerGCPeriod)
		case o.GetKind() == "DaemonSet" && o.GetName() == "nodegc-node":
			if err := editContainer(o, func(c map[string]any) {
				c["env"] = append(c["env"].([]any), apiEnv...)
				c["args"] = append(c["args"].([]any), "-v=4")
			}); err != nil {
				return "", nil, err
			}
			changes = append(changes, "DaemonSet: API on 127.0.0.1 via KUBERNETES_SERVICE_HOST/PORT, -v=4")
		case o.GetKind() == "Deployment" && o.GetName() == "nodegc-owner":
			err := errors.Join(
				unstructured.SetNestedField(o.Object, int64(1), "spec", "replicas"),
				unstructured.SetNestedField(o.Object, true, "spec", "template", "spec", "hostNetwork"),
				unstructured.SetNestedField(o.Object, "ClusterFirstWithHostNet", "spec", "template", "spec", "dnsPolicy"),
				editContainer(o, func(c map[string]any) {
					env, _ := c["env"].([]any)
					c["env"] = append(env, apiEnv...)
					c["args"] = append(c["args"].([]any),
						fmt.Sprintf("--healthz-bind-address=:%d", a.OwnerHealthzPort),
						fmt.Sprintf("--metrics-bind-address=:%d", a.OwnerMetricsPort))
					for _, p := range c["ports"].([]any) {
						pm := p.(map[string]any)
						switch pm["name"] {
						case "healthz":
							pm["containerPort"] = int64(a.OwnerHealthzPort)
						case "metrics":
							pm["containerPort"] = int64(a.OwnerMetricsPort)
						}
					}
				}))
			if err != nil {
				return "", nil, err
			}
			changes = append(changes, fmt.Sprintf("Deployment: 1 replica, hostNetwork, ports %d/%d, API on 127.0.0.1", a.OwnerHealthzPort, a.OwnerMetricsPort))
		}
	}
	if len(changes) != 3 {
		return "", nil, fmt.Errorf("expected the ConfigMap, the DaemonSet and the Deployment, changed only: %v", changes)
	}
	return tunedConfig, changes, nil
}

// tuneConfig sets the e2e timings in the configuration and checks that it
// still decodes strictly and validates.
func tuneConfig(data string) (string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		return "", err
	}
	section := func(name string) map[string]any {
		m, ok := doc[name].(map[string]any)
		if !ok {
			m = map[string]any{}
			doc[name] = m
		}
		return m
	}
	section("imageGC")["minimumGCAge"] = e2eImageMinimumGCAge
	section("containerGC")["period"] = e2eContainerGCPeriod
	out, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	loaded, err := config.Decode(out)
	if err != nil {
		return "", err
	}
	if errs := config.Validate(loaded.Config); len(errs) > 0 {
		return "", errs.ToAggregate()
	}
	return string(out), nil
}

func editContainer(o *unstructured.Unstructured, edit func(map[string]any)) error {
	ctrs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if err != nil || len(ctrs) != 1 {
		return fmt.Errorf("%s %s: want one container (%v)", o.GetKind(), o.GetName(), err)
	}
	edit(ctrs[0].(map[string]any))
	return unstructured.SetNestedSlice(o.Object, ctrs, "spec", "template", "spec", "containers")
}

// encodeObjects writes objs as a multi-document YAML manifest.
func encodeObjects(objs []*unstructured.Unstructured) ([]byte, error) {
	var buf bytes.Buffer
	for _, o := range objs {
		data, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	return buf.Bytes(), nil
}

// apply writes the rendered and adapted objects to one manifest file and
// applies it with `kubectl apply -f`, as an operator applies
// deploy/daemonset.yaml. The manifest is kept with the run's artifacts.
func (s *suite) apply(t *testing.T, objs []*unstructured.Unstructured) {
	data, err := encodeObjects(objs)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.ArtifactDir()
	manifest := filepath.Join(dir, "nodegc-e2e.yaml")
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s.manifest = manifest
	kubectl := testbed.Binary(t, "kubectl")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig="+s.kc.API.KubeconfigPath(), "apply", "-f", manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", manifest, err, out)
	}
	t.Logf("kubectl apply -f %s:\n  %s", manifest, strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "\n  "))
}

// waitDeployed waits for the DaemonSet's pod to be Running and Ready on
// the node, for the owner collector's pod to be Ready and hold the Lease
// nodegc/nodegc-owner-gc, and for the agent's /metrics to answer.
func (s *suite) waitDeployed(t *testing.T) {
	ctx := t.Context()
	cs := s.kc.Client()
	began := time.Now()
	var last *corev1.Pod
	err := poll(ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("nodegc").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=node"})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		last = &pods.Items[0]
		return podReady(last) && last.Spec.NodeName == s.kc.NodeName, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet pod not Running and Ready: %v: %s\n%s", err, describePod(last), s.kc.KubeletLogTail(30))
	}
	s.nodePod = last
	dsReady := time.Since(began)
	var ds *appsv1.DaemonSet
	if ds, err = cs.AppsV1().DaemonSets("nodegc").Get(ctx, "nodegc-node", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// The holder identity is the agent's host name plus a UUID; on the host
	// network that is the node's host name, so the leader is recognised by
	// its own nodegc_owner_gc_leader gauge.
	var lastOwner *corev1.Pod
	var holder string
	err = poll(ctx, 2*time.Minute, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("nodegc").List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "owner"}).String()})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		lastOwner = &pods.Items[0]
		lease, err := cs.CoordinationV1().Leases("nodegc").Get(ctx, "nodegc-owner-gc", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return false, nil
		}
		holder = *lease.Spec.HolderIdentity
		m, err := scrape(ctx, s.ownerMetricsPort)
		return err == nil && podReady(lastOwner) && m.sum("nodegc_owner_gc_leader") == 1, nil
	})
	if err != nil {
		t.Fatalf("owner collector not Ready with the Lease (holder %q): %v: %s", holder, err, describePod(lastOwner))
	}
	s.ownerPod = lastOwner
	if err := poll(ctx, 30*time.Second, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		m, err := scrape(ctx, s.metricsPort)
		return err == nil && m.has("nodegc_image_fs_capacity_bytes"), nil
	}); err != nil {
		t.Fatalf("/metrics of the DaemonSet pod on 127.0.0.1:%d: %v", s.metricsPort, err)
	}
	// The node GC holds the state directory's lock, and names its pod there
	// (POD_NAMESPACE and POD_NAME from the downward API).
	lockFile := filepath.Join(s.stateDir, agent.NodeLockFileName)
	if b, err := os.ReadFile(lockFile); err != nil || !strings.HasPrefix(string(b), "pod nodegc/"+s.nodePod.Name+" (pid ") {
		t.Errorf("%s holds %q (%v), want the DaemonSet pod nodegc/%s named", lockFile, b, err, s.nodePod.Name)
	}
	t.Logf("deployed: DaemonSet %d/%d ready (pod %s Running and Ready after %v, image %s), owner collector %s Ready holding Lease nodegc/nodegc-owner-gc (holder %s) after %v",
		ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, s.nodePod.Name, dsReady.Round(time.Millisecond), s.image,
		s.ownerPod.Name, holder, time.Since(began).Round(time.Millisecond))
}
