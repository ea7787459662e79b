package containers

import (
	"strconv"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The labels and annotations the kubelet puts on what it creates
// (pkg/kubelet/types/labels.go, kuberuntime/labels.go). Only containers and
// sandboxes carrying the labels are considered.
const (
	labelPodUID        = "io.kubernetes.pod.uid"
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelContainerName = "io.kubernetes.container.name"

	// annotationGracePeriod is the pod's termination grace period in
	// seconds, on every container.
	annotationGracePeriod = "io.kubernetes.pod.terminationGracePeriod"
	// annotationConfigSource says where the kubelet got the pod from:
	// "api", or "file" / "http" for static pods. The kubelet copies the
	// pod's annotations onto its sandbox.
	annotationConfigSource = "kubernetes.io/config.source"
	// annotationConfigMirror, on a mirror pod in the API, holds the UID of
	// the static pod it mirrors: the UID on the static pod's containers.
	annotationConfigMirror = "kubernetes.io/config.mirror"
)

// SourceAPI is the Sandbox.Source (kubernetes.io/config.source) of pods
// from the API server.
const SourceAPI = "api"

// State is a container's state as the runtime reports it.
type State string

// Container states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// Container is what the policy knows of one container.
type Container struct {
	ID        string
	SandboxID string
	// Managed says the container carries the kubelet's pod UID and
	// container name labels; others are never touched.
	Managed bool
	// PodUID, PodName, PodNamespace and Name come from the kubelet labels.
	PodUID, PodName, PodNamespace, Name string
	Attempt                             uint32
	State                               State
	CreatedAt                           time.Time
	// FinishedAt is the exit time (it is read only when ages count from
	// the exit; zero otherwise). When the runtime gives none, the Manager
	// dates it by when it first listed the container exited.
	FinishedAt time.Time
	// SeenCreatedSince is, for a created container, when the Manager
	// first listed it created, on the wall clock of now by the monotonic
	// clock's elapsed time: it is starting until StartGrace has passed
	// since both that and CreatedAt. Zero when not known.
	SeenCreatedSince time.Time
	// GracePeriod is the pod's termination grace period in seconds, from
	// the kubelet's annotation; -1 when absent.
	GracePeriod int64
}

// Sandbox is what the policy knows of one pod sandbox.
type Sandbox struct {
	ID string
	// Managed says the sandbox carries the kubelet's pod UID label.
	Managed                       bool
	PodUID, PodName, PodNamespace string
	Attempt                       uint32
	Ready                         bool
	CreatedAt                     time.Time
	// Source is the kubernetes.io/config.source annotation: "api", or
	// "file"/"http" for static pods; empty when absent.
	Source string
}

// PodLogDir is one directory NAMESPACE_NAME_UID under the pod logs directory.
type PodLogDir struct {
	Name   string
	PodUID string
	// ModTime is the directory's modification time: no earlier than its
	// creation, which the kubelet does right before it runs the sandbox.
	ModTime time.Time
}

// LogLink is one *.log symbolic link under the container logs directory.
type LogLink struct {
	Name string
	// ContainerID is parsed from the name (…-ID.log); empty if it has none.
	ContainerID string
	// Dangling says the link's target does not exist.
	Dangling bool
	// Elsewhere says the link's target lies outside the pod logs
	// directory: whether it exists cannot be told from nodegc's container,
	// which mounts only the log directories, so it does not count as
	// dangling (readLink).
	Elsewhere bool
	// Target is whose log the link points at, when its target is a
	// container log as the kubelet lays them out under the pod logs
	// directory; nil otherwise.
	Target *LogTarget
}

// LogTarget is the container whose log a path is, by the kubelet's layout
// <podLogsDirectory>/<namespace>_<pod>_<uid>/<container>/<attempt>.log.
type LogTarget struct {
	PodUID, Container string
	Attempt           uint32
}

// NodeState is everything the policy looks at on the node.
type NodeState struct {
	Containers []Container
	Sandboxes  []Sandbox
	LogDirs    []PodLogDir
	LogLinks   []LogLink
	// ListedAt is when the listing of the runtime began; zero: the
	// plan's time.
	ListedAt time.Time
	// PodLogsUnseen says the pod logs directory as nodegc sees it is not
	// the kubelet's: the runtime runs a container whose log lies under
	// it, and that log is not there, or the runtime cannot be asked where
	// it is (podLogsUnseen; a filesystem mounted on it on the host after
	// nodegc's container started, which its mount does not show, perhaps
	// over a copy of the logs from before). Whether a link dangles cannot be told then, nor can log
	// files be removed: the plan removes no link and no pod log
	// directory, and keeps every container a limit or maxAge would remove
	// (its logs would stay behind until its pod is deleted).
	PodLogsUnseen bool
	// RuntimeName and RuntimeVersion are what the runtime listed answers
	// to CRI Version ("containerd", "v2.1.4"), as the kubelet asks its
	// own: Policy.Plan checks them against what the Node reports
	// (PodView.NodeRuntime). Empty: not known, not checked.
	RuntimeName, RuntimeVersion string
}

// containerFromCRI converts a CRI container. It keeps no reference to c.
func containerFromCRI(c *runtimeapi.Container) Container {
	l := c.GetLabels()
	out := Container{
		ID:           c.GetId(),
		SandboxID:    c.GetPodSandboxId(),
		PodUID:       l[labelPodUID],
		PodName:      l[labelPodName],
		PodNamespace: l[labelPodNamespace],
		Name:         l[labelContainerName],
		Attempt:      c.GetMetadata().GetAttempt(),
		State:        stateFromCRI(c.GetState()),
		CreatedAt:    unixNanos(c.GetCreatedAt()),
		GracePeriod:  -1,
	}
	out.Managed = out.PodUID != "" && out.Name != ""
	if g, err := strconv.ParseInt(c.GetAnnotations()[annotationGracePeriod], 10, 64); err == nil && g >= 0 {
		out.GracePeriod = g
	}
	return out
}

// sandboxFromCRI converts a CRI pod sandbox. It keeps no reference to s.
func sandboxFromCRI(s *runtimeapi.PodSandbox) Sandbox {
	l := s.GetLabels()
	out := Sandbox{
		ID:           s.GetId(),
		PodUID:       l[labelPodUID],
		PodName:      l[labelPodName],
		PodNamespace: l[labelPodNamespace],
		Attempt:      s.GetMetadata().GetAttempt(),
		Ready:        s.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		CreatedAt:    unixNanos(s.GetCreatedAt()),
		Source:       s.GetAnnotations()[annotationConfigSource],
	}
	out.Managed = out.PodUID != ""
	return out
}

func stateFromCRI(s runtimeapi.ContainerState) State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return StateExited
	default:
		return StateUnknown
	}
}

// unixNanos converts a CRI timestamp; 0 (unset) stays the zero time.
func unixNanos(ns int64) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
