package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// DefaultControllers are the kube-controller-manager controllers a
// kubecluster runs: what a schedulable Node, Deployments, ReplicaSets and
// DaemonSets need, plus
// the "default" ServiceAccounts and kube-root-ca.crt ConfigMaps pods'
// API credentials need. Never the garbage collector: nodegc's owner GC is
// under test.
var DefaultControllers = []string{
	// Removes the node.kubernetes.io/not-ready taint the API server's
	// TaintNodesByCondition admission puts on a new Node, once it is Ready.
	"node-lifecycle-controller",
	"daemonset-controller",
	"deployment-controller",
	"replicaset-controller",
	"serviceaccount-controller",
	"root-ca-certificate-publisher-controller",
}

// Options tune a Cluster. The zero value gives a node whose containerd root
// shares /tmp's filesystem.
type Options struct {
	// NodeName is the Node's name; default "nodegc-e2e".
	NodeName string
	// ImageFSSize, when positive, puts containerd's root (the image
	// filesystem) on a filesystem of its own of that many bytes
	// (node.Options.SmallFS), so that disk pressure is reachable.
	ImageFSSize int64
	// NodeFSSize, when positive, puts the kubelet's root directory (its
	// nodefs: the filesystem its nodefs.available signal reads) on a
	// filesystem of its own of that many bytes, so that eviction
	// thresholds on nodefs do not depend on how full the host's disk is.
	NodeFSSize int64
	// Controllers replaces DefaultControllers. "garbage-collector-controller"
	// is refused.
	Controllers []string
	// KubeletFlags are appended to the kubelet's command line.
	KubeletFlags []string
	// KubeletMaxDeadPerContainer and KubeletMinContainerTTL are the
	// kubelet's --maximum-dead-containers-per-container and
	// --minimum-container-ttl-duration. kubelet's container GC cannot be
	// switched off; the defaults (1000 and 1h) make it remove nothing
	// within a test, so what tests observe is nodegc's doing.
	KubeletMaxDeadPerContainer int
	KubeletMinContainerTTL     time.Duration
	// MaxRestartBackoff caps CrashLoopBackOff (KubeletCrashLoopBackOffMax,
	// 1s to 300s); default 1s, so a restarting container leaves dead
	// instances within seconds instead of minutes.
	MaxRestartBackoff time.Duration
	// Kubelet are the kubelet's image GC and eviction settings at start;
	// the zero value turns its image GC and eviction off (RestartKubelet
	// changes them later).
	Kubelet KubeletSettings
	// StartTimeout bounds each start step; default 2m.
	StartTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.NodeName == "" {
		o.NodeName = "nodegc-e2e"
	}
	if o.Controllers == nil {
		o.Controllers = DefaultControllers
	}
	if o.KubeletMaxDeadPerContainer == 0 {
		o.KubeletMaxDeadPerContainer = 1000
	}
	if o.KubeletMinContainerTTL == 0 {
		o.KubeletMinContainerTTL = time.Hour
	}
	if o.MaxRestartBackoff == 0 {
		o.MaxRestartBackoff = time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	return o
}

// Cluster is a running single-node cluster. Its exported fields are set by
// Start and never change.
type Cluster struct {
	// API is the control plane: etcd and kube-apiserver.
	API *cluster.Cluster
	// ControllerManager runs Options.Controllers.
	ControllerManager *cluster.ControllerManager
	// Node is the node's containerd 2.x, with its registry.
	Node *node.Node
	// NodeName is the Node's name in the API (the kubelet's
	// --hostname-override).
	NodeName string
	// Dir holds the kubelet's config, the kubelet's and kube-scheduler's
	// logs and certificates: Node.Dir/kube.
	Dir string
	// KubeletDir is the kubelet's --root-dir: Node.Dir/kubelet.
	KubeletDir string
	// PodLogsDir is the kubelet's podLogsDir: Node.PodLogs.
	PodLogsDir string
	// KubeletPort and KubeletHealthzPort are the kubelet's ports on
	// 127.0.0.1.
	KubeletPort, KubeletHealthzPort int

	opts Options
	bins map[string]string

	// restartMu serializes RestartKubelet calls.
	restartMu sync.Mutex

	mu              sync.Mutex
	kubelet         *proc.Process
	kubeletSettings KubeletSettings
	kubeletStarts   int // numbers the kubelet's log files
	scheduler       *proc.Process
	lock            *machineLock
	apiPIDs         map[string]int

	artifacts    string // where the teardown saves logs; "" for none
	teardownOnce sync.Once
	leftovers    []string
}

// Start brings up the cluster and registers its teardown with t.Cleanup:
// etcd + kube-apiserver (internal/testbed/cluster), a throw-away containerd
// 2.x (internal/testbed/node), kube-controller-manager with
// Options.Controllers, kube-scheduler and a kubelet, and returns once the
// Node is Ready. It stops the test (testbed.Require) when not root or when a
// binary is missing (`make tools`), and fails it when a start fails. After
// the teardown, a last cleanup checks that no process, mount, cgroup or
// file of the cluster is left, and fails the test if one is.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	testbed.RequireRoot(t)
	opts = opts.withDefaults()
	for _, ctl := range opts.Controllers {
		if ctl == "garbage-collector-controller" || ctl == "garbagecollector" {
			t.Fatalf("kubecluster: the garbage collector must not run (nodegc's owner GC is under test)")
		}
	}
	c := &Cluster{
		NodeName: opts.NodeName,
		opts:     opts,
		bins: map[string]string{
			"kubelet":        testbed.Binary(t, "kubelet"),
			"kube-scheduler": testbed.Binary(t, "kube-scheduler"),
		},
	}
	testbed.Containerd(t, testbed.Containerd2) // fails the test early when containerd 2.x is not built
	if a, ok := t.(artifactDirer); ok {
		c.artifacts = a.ArtifactDir()
	}
	began := time.Now()
	ctx := t.Context()

	lockCtx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	lock, err := lockMachine(lockCtx, t.Logf)
	cancel()
	if err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	c.lock = lock
	// Registered first, so it runs last: after the kubelet, the
	// controller manager, containerd and the control plane are gone.
	t.Cleanup(func() { c.finalCheck(t) })

	c.API = cluster.Start(t, cluster.Options{
		StartTimeout: opts.StartTimeout,
		// Pods get their API credentials as in any cluster: the
		// controller manager's serviceaccount and
		// root-ca-certificate-publisher controllers make what the plugin
		// needs.
		ServiceAccountAdmission: true,
	})
	c.apiPIDs = c.API.PIDs()
	apiUp := time.Now()
	c.Node = node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: opts.ImageFSSize, StartTimeout: opts.StartTimeout})
	nodeUp := time.Now()
	// After node.Start's sweep of dead test processes' node directories.
	if err := c.lock.sweepStale(t.Logf); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}

	c.Dir = filepath.Join(c.Node.Dir, "kube")
	c.KubeletDir = filepath.Join(c.Node.Dir, "kubelet")
	c.PodLogsDir = c.Node.PodLogs
	for _, d := range []string{c.Dir, c.KubeletDir, c.PodLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("kubecluster: %v", err)
		}
	}
	if opts.NodeFSSize > 0 {
		// Under the node's directory: its teardown unmounts it and
		// detaches the loop device, after this cluster's own teardown.
		kind, err := node.MountSmallFS(t, filepath.Join(c.Node.Dir, "nodefs.img"), c.KubeletDir, opts.NodeFSSize, "")
		if err != nil {
			t.Fatalf("kubecluster: the kubelet's root directory: %v", err)
		}
		t.Logf("kubecluster: the kubelet's root directory (nodefs) on a %s of %d MiB", kind, opts.NodeFSSize>>20)
	}
	caPath := filepath.Join(c.Dir, "ca.crt")
	if err := os.WriteFile(caPath, c.API.CACert(), 0o644); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	c.ControllerManager = c.API.StartControllerManagerWith(t, cluster.ControllerManagerOptions{
		Controllers: opts.Controllers,
		Flags:       []string{"--root-ca-file=" + caPath},
	})
	c.apiPIDs[c.ControllerManager.Name] = c.ControllerManager.PID()

	// From here on the teardown has a kubelet and pods to take care of; it
	// runs before the controller manager, containerd and control plane go.
	t.Cleanup(func() { c.teardown(t) })
	if err := c.startScheduler(ctx); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	schedUp := time.Now()
	if err := c.Node.CreateCgroupParent(); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	if err := c.startKubelet(ctx, opts.Kubelet, nil); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	if err := c.waitNodeReady(ctx, time.Time{}); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	// The ServiceAccount admission plugin refuses pods until their
	// namespace's "default" ServiceAccount exists.
	if err := c.waitDefaultServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	t.Logf("kubecluster: node %s Ready in %v (control plane %v, containerd %v, controller manager + scheduler %v, kubelet %v); kubelet 127.0.0.1:%d, dir %s",
		c.NodeName, time.Since(began).Round(time.Millisecond), apiUp.Sub(began).Round(time.Millisecond),
		nodeUp.Sub(apiUp).Round(time.Millisecond), schedUp.Sub(nodeUp).Round(time.Millisecond),
		time.Since(schedUp).Round(time.Millisecond), c.KubeletPort, c.Node.Dir)
	return c
}

// waitDefaultServiceAccount waits for the controller manager's
// serviceaccount-controller to create namespace ns's "default"
// ServiceAccount.
func (c *Cluster) waitDefaultServiceAccount(ctx context.Context, ns string) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.API.Client().CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no ServiceAccount %s/default (serviceaccount-controller): %w", ns, err)
	}
	return nil
}

// Client returns the admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.API.Client() }

// KubeletPID returns the kubelet's PID.
func (c *Cluster) KubeletPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelet.PID()
}

// KubeletLogTail returns the last n lines of the kubelet's log.
func (c *Cluster) KubeletLogTail(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelet.Tail(n)
}

// KubeletLogPath returns the file holding the kubelet's log (--v=2: it
// logs every PLEG event and pod sync).
func (c *Cluster) KubeletLogPath() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubelet.LogPath
}

// Leftovers returns what the final check found after the teardown (empty
// when everything was removed); only meaningful after the test's cleanups
// ran.
func (c *Cluster) Leftovers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leftovers
}

// teardown, in this order: stop scheduling, delete the pods
// through the API (the kubelet stops their containers), stop the kubelet,
// remove what is left of the pods through CRI, unmount the kubelet's root
// directory, remove the kubelet's files in fixed host paths. The controller
// manager, containerd (with its hard sweep) and the control plane are torn
// down by their own cleanups, which run after this one.
func (c *Cluster) teardown(t testing.TB) {
	c.teardownOnce.Do(func() {
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c.mu.Lock()
		kubelet, scheduler := c.kubelet, c.scheduler
		c.mu.Unlock()
		if t.Failed() {
			for _, p := range []*proc.Process{kubelet, scheduler} {
				if p != nil {
					t.Logf("--- last lines of %s log (%s) ---\n%s", p.Name, p.LogPath, p.Tail(60))
				}
			}
		}
		// First, while the pods' logs are still there (the kubelet removes a
		// deleted pod's containers, and their logs, as they die).
		saved := 0
		if c.artifacts != "" {
			saved = c.saveArtifacts(c.artifacts)
		}
		var errs []error
		if _, err := scheduler.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
		deleted := 0
		if kubelet != nil && !kubelet.Exited() {
			var err error
			deleted, err = c.deleteNodePods(ctx)
			if err != nil {
				t.Logf("kubecluster teardown: deleting pods through the API: %v (going on)", err)
			}
		}
		killed, err := kubelet.Stop(10 * time.Second)
		if err != nil {
			errs = append(errs, err)
		}
		sandboxes, err := c.removeSandboxes(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		mounts, err := node.UnmountAll(c.KubeletDir)
		if err != nil {
			errs = append(errs, err)
		}
		files := sweepHostPaths(c.Node.Dir)
		if err := errors.Join(errs...); err != nil {
			t.Errorf("kubecluster teardown: %v", err)
		}
		t.Logf("kubecluster torn down in %v: %d pods deleted through the API, kubelet stopped (SIGKILL needed: %t), %d sandboxes removed through CRI, %d mounts under the kubelet root dir unmounted, %d kubelet files and links removed; %d log files saved to %s (kept with go test -artifacts)",
			time.Since(began).Round(time.Millisecond), deleted, killed, sandboxes, mounts, files, saved, c.artifacts)
	})
}

// deleteNodePods deletes every pod bound to the node and waits (up to 45s)
// for the kubelet to stop them and confirm; pods still there then are
// deleted with grace period 0.
func (c *Cluster) deleteNodePods(ctx context.Context) (int, error) {
	pods := c.API.Client().CoreV1().Pods(metav1.NamespaceAll)
	sel := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", c.NodeName).String()}
	list, err := pods.List(ctx, sel)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, p := range list.Items {
		err := c.API.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &p.UID},
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	var left int
	err = wait.PollUntilContextCancel(wctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := pods.List(wctx, sel)
		if err != nil {
			return false, nil
		}
		left = len(l.Items)
		return left == 0, nil
	})
	if err != nil {
		l, _ := pods.List(ctx, sel)
		for _, p := range l.Items {
			c.API.Client().CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		errs = append(errs, fmt.Errorf("%d pods not gone 45s after deletion: deleted with grace period 0", left))
	}
	return len(list.Items), errors.Join(errs...)
}

// removeSandboxes stops and removes every sandbox through CRI: the kubelet
// does not stop pods when it exits.
func (c *Cluster) removeSandboxes(ctx context.Context) (int, error) {
	if !c.Node.Alive() {
		return 0, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	resp, err := c.Node.Runtime.ListPodSandbox(lctx, &runtimeapi.ListPodSandboxRequest{})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range resp.GetItems() {
		errs = append(errs, c.Node.StopPod(ctx, sb.GetId()), c.Node.RemovePod(ctx, sb.GetId()))
	}
	return len(resp.GetItems()), errors.Join(errs...)
}
