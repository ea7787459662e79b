package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels and annotations the kubelet puts on sandboxes and containers
// (pkg/kubelet/types/labels.go, kuberuntime/labels.go).
const (
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelContainerName = "io.kubernetes.container.name"

	AnnotationRestartCount = "io.kubernetes.container.restartCount"
	AnnotationHash         = "io.kubernetes.container.hash"
	AnnotationGracePeriod  = "io.kubernetes.pod.terminationGracePeriod"
)

// Deadlines of single CRI calls made by the helpers.
const (
	callTimeout = 30 * time.Second
	pullTimeout = 2 * time.Minute
)

// PodSpec describes a pod sandbox. Namespace defaults to "default" and UID
// to a random UUID.
type PodSpec struct {
	Name, Namespace, UID string
	Attempt              uint32
	Labels, Annotations  map[string]string
	// LogsUnder, if set, is the pod logs directory the pod's log directory
	// is made in (the kubelet's podLogsDir), instead of the node's PodLogs.
	LogsUnder string
}

// RunPod runs a host-network pod sandbox under the node's cgroup parent,
// labelled like a kubelet's, and returns its ID.
func (n *Node) RunPod(ctx context.Context, spec PodSpec) (string, error) {
	if spec.Namespace == "" {
		spec.Namespace = "default"
	}
	if spec.UID == "" {
		spec.UID = newUID()
	}
	logsUnder := n.PodLogs
	if spec.LogsUnder != "" {
		logsUnder = spec.LogsUnder
	}
	logDir := filepath.Join(logsUnder, fmt.Sprintf("%s_%s_%s", spec.Namespace, spec.Name, spec.UID))
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", fmt.Errorf("run pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelPodUID], labels[LabelPodName], labels[LabelPodNamespace] = spec.UID, spec.Name, spec.Namespace
	annotations := map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": time.Now().Format(time.RFC3339Nano)}
	maps.Copy(annotations, spec.Annotations)
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: spec.Name, Uid: spec.UID, Namespace: spec.Namespace, Attempt: spec.Attempt},
		LogDirectory: logDir,
		Labels:       labels,
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: n.CgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: hostNetwork(),
			},
		},
	}
	ctx, cancel := context.WithTimeout(ctx, pullTimeout) // may pull the sandbox image
	defer cancel()
	resp, err := n.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("run pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	n.mu.Lock()
	n.pods[resp.GetPodSandboxId()] = cfg
	n.mu.Unlock()
	return resp.GetPodSandboxId(), nil
}

func hostNetwork() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// StopPod stops a pod sandbox and its containers.
func (n *Node) StopPod(ctx context.Context, id string) error {
	return retryPodCall(ctx, "stop pod "+id, func(ctx context.Context) error {
		_, err := n.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
		return err
	})
}

// RemovePod removes a pod sandbox and its containers.
func (n *Node) RemovePod(ctx context.Context, id string) error {
	if err := retryPodCall(ctx, "remove pod "+id, func(ctx context.Context) error {
		_, err := n.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		return err
	}); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.pods, id)
	n.mu.Unlock()
	return nil
}

// podCallBackoff spaces the tries of a pod's stop or removal: 5 tries, the
// waits between them doubling from 100 ms (1.5 s in all).
var podCallBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 5}

// retryPodCall makes call, an idempotent stop or removal of a pod sandbox,
// and tries it again when it fails, as kubelet does at the pod's next sync.
// containerd 1.6 can fail to kill a container whose process exits right
// then ("failed to kill container: ttrpc: closed", when a pod is stopped
// just after its container ran "exit 1"); the next try finds it stopped.
func retryPodCall(ctx context.Context, what string, call func(context.Context) error) error {
	tries := 0
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, podCallBackoff, func(ctx context.Context) (bool, error) {
		tries++
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		last = call(cctx)
		return last == nil, nil
	})
	switch {
	case err == nil:
		return nil
	case last == nil: // ctx ended before the first try
		return fmt.Errorf("%s: %w", what, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w (then %w)", what, last, ctx.Err())
	}
	return fmt.Errorf("%s (%d tries): %w", what, tries, last)
}

// newUID returns a random UUID (version 4), like a pod's metadata.uid.
func newUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
