package containers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/cri"
)

// testNode is a real containerd with the test image pulled, a CRI client of
// nodegc's own, and a container logs directory of its own.
type testNode struct {
	*node.Node
	image   string
	client  *cri.Client
	linkDir string
}

func startNode(t *testing.T, v testbed.ContainerdVersion, reg *registry.Registry) *testNode {
	t.Helper()
	return startNodeWith(t, node.Options{Version: v, Registry: reg})
}

// onEachContainerd runs scenario on a new node of each containerd version
// of the test bed, in a subtest named after it; the nodes pull from one
// registry.
func onEachContainerd(t *testing.T, scenario func(t *testing.T, v testbed.ContainerdVersion, n *testNode)) {
	t.Helper()
	testbed.RequireRoot(t)
	reg := registry.Start(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) { scenario(t, v, startNode(t, v, reg)) })
	}
}

// startNodeWith starts a node with opts (Version and Registry set).
func startNodeWith(t *testing.T, opts node.Options) *testNode {
	t.Helper()
	ctx := t.Context()
	n := node.Start(t, opts)
	img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "gc/app"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, img.Ref); err != nil {
		t.Fatal(err)
	}
	client, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	linkDir := filepath.Join(n.Dir, "containers")
	if err := os.MkdirAll(linkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &testNode{Node: n, image: img.Ref, client: client, linkDir: linkDir}
}

// gcConfig is the default configuration pointed at the node's log
// directories.
func (n *testNode) gcConfig(mutate func(*config.ContainerGCConfiguration)) config.ContainerGCConfiguration {
	c := config.Defaulted().ContainerGC
	c.PodLogsDirectory, c.ContainerLogsDirectory = n.PodLogs, n.linkDir
	if mutate != nil {
		mutate(&c)
	}
	return c
}

func (n *testNode) manager(t *testing.T, cfg config.ContainerGCConfiguration, pods *containers.APIPodSource) *containers.Manager {
	t.Helper()
	opts := containers.Options{Config: cfg, Runtime: n.client}
	if pods != nil {
		opts.Pods = pods
	}
	m, err := containers.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runDead runs attempts of container name in pod that exit at once, one
// after the other, and returns their IDs, oldest first. Like the kubelet,
// it links each log into the container logs directory.
func (n *testNode) runDead(t *testing.T, podID, podName, podNS, name string, attempts int) []string {
	t.Helper()
	var ids []string
	for a := range attempts {
		id, err := n.RunContainer(t.Context(), podID, node.ContainerSpec{Name: name, Image: n.image, Args: []string{"exit", "1"}, Attempt: uint32(a)})
		if err != nil {
			t.Fatal(err)
		}
		st, err := n.WaitContainerState(t.Context(), id, runtimeapi.ContainerState_CONTAINER_EXITED, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		n.link(t, podName, podNS, name, id, st.GetLogPath())
		ids = append(ids, id)
	}
	return ids
}

// link makes the kubelet's /var/log/containers link of a container.
func (n *testNode) link(t *testing.T, podName, podNS, name, id, logPath string) string {
	t.Helper()
	p := filepath.Join(n.linkDir, fmt.Sprintf("%s_%s_%s-%s.log", podName, podNS, name, id))
	if err := os.Symlink(logPath, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// containerStates lists the node's containers: ID -> state.
func (n *testNode) containerStates(t *testing.T) map[string]runtimeapi.ContainerState {
	t.Helper()
	cs, err := n.client.ListContainers(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]runtimeapi.ContainerState{}
	for _, c := range cs {
		out[c.GetId()] = c.GetState()
	}
	return out
}

// podsOnNode counts the containers and sandboxes of each pod UID.
func (n *testNode) podsOnNode(t *testing.T) map[string]string {
	t.Helper()
	ctx := t.Context()
	cs, err := n.client.ListContainers(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sbs, err := n.client.ListPodSandboxes(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string][2]int{}
	for _, c := range cs {
		k := count[c.GetLabels()[containers.LabelPodUID]]
		k[0]++
		count[c.GetLabels()[containers.LabelPodUID]] = k
	}
	for _, s := range sbs {
		k := count[s.GetLabels()[containers.LabelPodUID]]
		k[1]++
		count[s.GetLabels()[containers.LabelPodUID]] = k
	}
	out := map[string]string{}
	for uid, k := range count {
		out[uid] = fmt.Sprintf("%d containers, %d sandboxes", k[0], k[1])
	}
	return out
}

func removals(p *containers.Plan) []string {
	var out []string
	for _, d := range p.RemoveContainers {
		out = append(out, d.Container.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveSandboxes {
		out = append(out, d.Sandbox.ID+":"+d.Reason)
	}
	for _, d := range p.RemoveLogDirs {
		out = append(out, d.Dir.Name+":"+d.Reason)
	}
	for _, d := range p.RemoveLogLinks {
		out = append(out, d.Link.Name+":"+d.Reason)
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func podUID(t *testing.T, n *testNode, podID string) string {
	t.Helper()
	sbs, err := n.client.ListPodSandboxes(t.Context(), &runtimeapi.PodSandboxFilter{Id: podID})
	if err != nil || len(sbs) != 1 {
		t.Fatalf("sandbox %s: %v (%d found)", podID, err, len(sbs))
	}
	return sbs[0].GetMetadata().GetUid()
}

func startSource(t *testing.T, c *cluster.Cluster, nodeName string) *containers.APIPodSource {
	t.Helper()
	return startSourceWith(t, c, containers.PodSourceOptions{NodeName: nodeName})
}

func startSourceWith(t *testing.T, c *cluster.Cluster, opts containers.PodSourceOptions) *containers.APIPodSource {
	t.Helper()
	s, err := containers.NewAPIPodSource(c.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return s
}

func authoritative(s *containers.APIPodSource) bool { return s.View(time.Now()).Authoritative }

// registerNode creates the Node object name as a kubelet registers its node:
// nodegc's pod view counts only while the Node of its name exists.
func registerNode(t *testing.T, c *cluster.Cluster, name string) *corev1.Node {
	t.Helper()
	return registerNodeBooted(t, c, name, "")
}

// registerNodeBooted is registerNode whose kubelet then reports the boot ID
// bootID in the Node's status, unless empty.
func registerNodeBooted(t *testing.T, c *cluster.Cluster, name, bootID string) *corev1.Node {
	t.Helper()
	n, err := c.Client().CoreV1().Nodes().Create(t.Context(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: goruntime.GOARCH,
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if bootID == "" {
		return n
	}
	n.Status.NodeInfo.BootID = bootID
	if n, err = c.Client().CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return n
}

// laterClock is the real clock moved d ahead. A pod source on it dates its
// lists d later: as if the pods on the node had been running for d when the
// source listed them, which a test cannot wait for.
type laterClock struct{ d time.Duration }

func (c laterClock) Now() time.Time                  { return time.Now().Add(c.d) }
func (c laterClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
