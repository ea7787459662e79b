package kubecluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// kubeletConfig is the KubeletConfiguration of the test node: cgroupfs on a cgroup v1 hybrid machine, no QoS
// cgroups, the node's cgroup parent as cgroupRoot (so the containerd
// teardown sweeps every pod cgroup), pod logs under the node's directory,
// the API on loopback only, CrashLoopBackOff capped at MaxRestartBackoff so
// a restarting container leaves dead instances within seconds, and the
// image GC and eviction of KubeletSettings (by default: kubelet's own image
// GC off, as nodegc does it, and no eviction).
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
imageGCHighThresholdPercent: {{.ImageGCHigh}}
imageGCLowThresholdPercent: {{.ImageGCLow}}
{{- if .ImageMinimumGCAge}}
imageMinimumGCAge: {{.ImageMinimumGCAge}}
{{- end}}
imageMaximumGCAge: 0s
evictionHard: {{.EvictionHard}}
{{- if .EvictionPressureTransitionPeriod}}
evictionPressureTransitionPeriod: {{.EvictionPressureTransitionPeriod}}
{{- end}}
podLogsDir: {{.PodLogsDir}}
resolvConf: ""
nodeStatusUpdateFrequency: 2s
featureGates:
  KubeletCrashLoopBackOffMax: true
crashLoopBackOff:
  maxContainerRestartPeriod: {{.MaxRestartBackoff}}
`))

// KubeletSettings are the KubeletConfiguration fields a test chooses
// (Options.Kubelet, RestartKubelet). The zero value is the test node's
// default: the kubelet's own image GC off and no eviction.
type KubeletSettings struct {
	// ImageGCHighThresholdPercent and ImageGCLowThresholdPercent are the
	// kubelet's image GC thresholds; 0 means 100 and 99: its threshold
	// image GC off (nodegc does it). The kubelet's defaults are 85 and 80.
	ImageGCHighThresholdPercent, ImageGCLowThresholdPercent int32
	// ImageMinimumGCAge is imageMinimumGCAge; 0 leaves the kubelet's
	// default (2m).
	ImageMinimumGCAge time.Duration
	// EvictionHard is evictionHard ("imagefs.available": "15%", ...); nil
	// or empty means {}: the kubelet evicts nothing.
	EvictionHard map[string]string
	// EvictionPressureTransitionPeriod is how long the kubelet keeps a
	// pressure condition after the threshold was last met; 0 leaves the
	// kubelet's default (5m).
	EvictionPressureTransitionPeriod time.Duration
}

func (s KubeletSettings) withDefaults() KubeletSettings {
	if s.ImageGCHighThresholdPercent == 0 {
		s.ImageGCHighThresholdPercent = 100
	}
	if s.ImageGCLowThresholdPercent == 0 {
		s.ImageGCLowThresholdPercent = 99
	}
	return s
}

// String describes the settings as the KubeletConfiguration says them.
func (s KubeletSettings) String() string {
	s = s.withDefaults()
	out := fmt.Sprintf("imageGCHighThresholdPercent %d, imageGCLowThresholdPercent %d", s.ImageGCHighThresholdPercent, s.ImageGCLowThresholdPercent)
	if s.ImageMinimumGCAge > 0 {
		out += ", imageMinimumGCAge " + s.ImageMinimumGCAge.String()
	}
	eh, _ := json.Marshal(s.EvictionHard)
	if len(s.EvictionHard) == 0 {
		eh = []byte("{}")
	}
	out += ", evictionHard " + string(eh)
	if s.EvictionPressureTransitionPeriod > 0 {
		out += ", evictionPressureTransitionPeriod " + s.EvictionPressureTransitionPeriod.String()
	}
	return out
}

type kubeletParams struct {
	Endpoint, CgroupRoot, PodLogsDir string
	Port, HealthzPort                int
	MaxRestartBackoff                string
	ImageGCHigh, ImageGCLow          int32
	ImageMinimumGCAge                string
	EvictionHard                     string
	EvictionPressureTransitionPeriod string
}

// writeKubeletConfig renders the kubelet's configuration for settings and
// ports into c.Dir/kubelet.yaml.
func (c *Cluster) writeKubeletConfig(s KubeletSettings, port, healthzPort int) (string, error) {
	s = s.withDefaults()
	eh := []byte("{}")
	if len(s.EvictionHard) > 0 {
		var err error
		if eh, err = json.Marshal(s.EvictionHard); err != nil { // JSON is YAML: quoted keys and values
			return "", err
		}
	}
	p := kubeletParams{
		Endpoint:          c.Node.Endpoint,
		CgroupRoot:        c.Node.CgroupParent,
		PodLogsDir:        c.PodLogsDir,
		Port:              port,
		HealthzPort:       healthzPort,
		MaxRestartBackoff: c.opts.MaxRestartBackoff.String(),
		ImageGCHigh:       s.ImageGCHighThresholdPercent,
		ImageGCLow:        s.ImageGCLowThresholdPercent,
		EvictionHard:      string(eh),
	}
	if s.ImageMinimumGCAge > 0 {
		p.ImageMinimumGCAge = s.ImageMinimumGCAge.String()
	}
	if s.EvictionPressureTransitionPeriod > 0 {
		p.EvictionPressureTransitionPeriod = s.EvictionPressureTransitionPeriod.String()
	}
	var buf bytes.Buffer
	if err := kubeletConfig.Execute(&buf, p); err != nil {
		return "", err
	}
	path := c.KubeletConfigPath()
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// KubeletConfigPath is the kubelet's KubeletConfiguration file (--config):
// what it runs with now.
func (c *Cluster) KubeletConfigPath() string { return filepath.Join(c.Dir, "kubelet.yaml") }

// KubeletSettings returns the settings the running kubelet was started with.
func (c *Cluster) KubeletSettings() KubeletSettings {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kubeletSettings
}

// startKubelet writes the kubelet's config and starts it, and returns once
// the kubelet's /healthz answers. With ports nil it picks free ones,
// retrying with fresh ports when one was taken meanwhile; with ports (a
// restart) it uses those, retrying while the previous kubelet's sockets
// are still being released.
func (c *Cluster) startKubelet(ctx context.Context, s KubeletSettings, ports []int) error {
	bin := c.bins["kubelet"]
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	fixed := ports != nil
	for attempt := 1; ; attempt++ {
		if !fixed {
			var err error
			if ports, err = testbed.FreePorts(2); err != nil {
				return err
			}
		}
		cfgPath, err := c.writeKubeletConfig(s, ports[0], ports[1])
		if err != nil {
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
		c.mu.Lock()
		c.kubeletStarts++
		logPath := filepath.Join(c.Dir, fmt.Sprintf("kubelet.%d.log", c.kubeletStarts))
		c.mu.Unlock()
		p, err := proc.Start("kubelet", bin, args, nil, logPath)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.kubelet = p
		c.kubeletSettings = s
		c.mu.Unlock()
		if !fixed {
			c.KubeletPort, c.KubeletHealthzPort = ports[0], ports[1]
		}
		err = p.WaitReady(ctx, func(ctx context.Context) error {
			return proc.HealthzOK(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]))
		})
		if err == nil {
			return nil
		}
		if _, stopErr := p.Stop(10 * time.Second); stopErr != nil {
			return fmt.Errorf("%w; stop: %v", err, stopErr)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == 5 {
			return fmt.Errorf("kubelet not healthy: %w\n%s", err, p.Tail(40))
		}
		if fixed {
			select {
			case <-ctx.Done():
				return fmt.Errorf("kubelet not healthy: %w", err)
			case <-time.After(time.Second):
			}
		}
	}
}

// RestartKubelet stops the kubelet (SIGTERM, SIGKILL after 10s) and starts
// it again with settings, on the same ports, root directory and
// certificates, and returns once it answers /healthz and has posted the
// Node's status again, Ready. The pods keep running: the kubelet does not
// stop them when it exits, and the new one adopts their containers. Restart
// with KubeletSettings{} for the test node's default.
func (c *Cluster) RestartKubelet(ctx context.Context, s KubeletSettings) error {
	c.restartMu.Lock()
	defer c.restartMu.Unlock()
	c.mu.Lock()
	old := c.kubelet
	c.mu.Unlock()
	began := time.Now()
	if _, err := old.Stop(10 * time.Second); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	if err := c.startKubelet(ctx, s, []int{c.KubeletPort, c.KubeletHealthzPort}); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	if err := c.waitNodeReady(ctx, began); err != nil {
		return fmt.Errorf("restart kubelet: %w", err)
	}
	return nil
}

// KubeletConfigz returns the configuration the running kubelet reports on
// its /configz endpoint (its own view of the file, with its defaults).
func (c *Cluster) KubeletConfigz(ctx context.Context) (*kubeletconfigv1beta1.KubeletConfiguration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/configz", c.KubeletPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := loopbackTLS.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubelet /configz: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("kubelet /configz: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kubelet /configz: %s: %s", resp.Status, body)
	}
	var out struct {
		KubeletConfig kubeletconfigv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("kubelet /configz: %w", err)
	}
	return &out.KubeletConfig, nil
}

// loopbackTLS reads the kubelet's API on 127.0.0.1: its serving
// certificate is self-signed.
var loopbackTLS = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback, a test's own kubelet
}}

// waitNodeReady waits until the Node is registered and Ready, with a
// heartbeat (whole seconds in the API) in a second after since when since
// is set: posted by a kubelet started after since.
func (c *Cluster) waitNodeReady(ctx context.Context, since time.Time) error {
	c.mu.Lock()
	kubelet := c.kubelet
	c.mu.Unlock()
	after := since.Truncate(time.Second).Add(time.Second)
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if kubelet.Exited() {
			return false, fmt.Errorf("kubelet exited: %v", kubelet.Err())
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
				last = fmt.Sprintf("Ready=%s (%s: %s), heartbeat %s", cond.Status, cond.Reason, cond.Message, cond.LastHeartbeatTime.UTC().Format(time.RFC3339))
				fresh := since.IsZero() || !cond.LastHeartbeatTime.Time.Before(after)
				return cond.Status == corev1.ConditionTrue && fresh, nil
			}
		}
		last = "no Ready condition"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready (%s): %w\n%s", c.NodeName, last, err, kubelet.Tail(40))
	}
	return nil
}
