package kubecluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// kubeletConfig is the KubeletConfiguration of the test node: cgroupfs on a cgroup v1 hybrid machine, no QoS
// cgroups, the node's cgroup parent as cgroupRoot (so the containerd
// teardown sweeps every pod cgroup), no eviction, kubelet's own image GC off
// (nodegc does it), pod logs under the node's directory, the API on
// loopback only, and CrashLoopBackOff capped at MaxRestartBackoff so a
// restarting container leaves dead instances within seconds.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: {{.Endpoint}}
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
cgroupsPerQOS: false
failSwapOn: false
failCgroupV1: false
enforceNodeAllocatable: []
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
port: {{.Port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.HealthzPort}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMaximumGCAge: 0s
evictionHard: {}
podLogsDir: {{.PodLogsDir}}
resolvConf: ""
nodeStatusUpdateFrequency: 2s
featureGates:
  KubeletCrashLoopBackOffMax: true
crashLoopBackOff:
  maxContainerRestartPeriod: {{.MaxRestartBackoff}}
`))

type kubeletParams struct {
	Endpoint, CgroupRoot, PodLogsDir string
	Port, HealthzPort                int
	MaxRestartBackoff                string
}

// startKubelet writes the kubelet's config and starts it, retrying with
// fresh ports when one was taken meanwhile. It returns once the kubelet's
// /healthz answers.
func (c *Cluster) startKubelet(ctx context.Context) error {
	bin := c.bins["kubelet"]
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		ports, err := testbed.FreePorts(2)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		err = kubeletConfig.Execute(&buf, kubeletParams{
			Endpoint:          c.Node.Endpoint,
			CgroupRoot:        c.Node.CgroupParent,
			PodLogsDir:        c.PodLogsDir,
			Port:              ports[0],
			HealthzPort:       ports[1],
			MaxRestartBackoff: c.opts.MaxRestartBackoff.String(),
		})
		if err != nil {
			return err
		}
		cfgPath := filepath.Join(c.Dir, "kubelet.yaml")
		if err := os.WriteFile(cfgPath, buf.Bytes(), 0o644); err != nil {
			return err
		}
		args := []string{
			"--config=" + cfgPath,
			"--kubeconfig=" + c.API.KubeconfigPath(),
			"--hostname-override=" + c.NodeName,
			"--root-dir=" + c.KubeletDir,
			"--cert-dir=" + filepath.Join(c.Dir, "kubelet-pki"),
			// kubelet's container GC cannot be switched off (it runs every
			// minute); with these deprecated flags it removes nothing a test
			// lasts long enough to see, so what is removed is nodegc's doing.
			fmt.Sprintf("--maximum-dead-containers-per-container=%d", c.opts.KubeletMaxDeadPerContainer),
			"--maximum-dead-containers=-1",
			"--minimum-container-ttl-duration=" + c.opts.KubeletMinContainerTTL.String(),
			"--v=2",
		}
		args = append(args, c.opts.KubeletFlags...)
		p, err := proc.Start("kubelet", bin, args, nil, filepath.Join(c.Dir, fmt.Sprintf("kubelet.%d.log", attempt)))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.kubelet = p
		c.mu.Unlock()
		c.KubeletPort, c.KubeletHealthzPort = ports[0], ports[1]
		err = p.WaitReady(ctx, func(ctx context.Context) error {
			return proc.HealthzOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]))
		})
		if err == nil {
			return nil
		}
		if _, stopErr := p.Stop(10 * time.Second); stopErr != nil {
			return fmt.Errorf("%w; stop: %v", err, stopErr)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == 3 {
			return fmt.Errorf("kubelet not healthy: %w\n%s", err, p.Tail(40))
		}
	}
}

// waitNodeReady waits until the Node is registered and Ready.
func (c *Cluster) waitNodeReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if c.kubelet.Exited() {
			return false, fmt.Errorf("kubelet exited: %v", c.kubelet.Err())
		}
		n, err := c.API.Client().CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			last = "not registered"
			return false, nil
		}
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s: %s)", cond.Status, cond.Reason, cond.Message)
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w\n%s", c.NodeName, last, err, c.kubelet.Tail(40))
	}
	return nil
}
