package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
)

const (
	// GroupName is the API group of the nodegc configuration.
	GroupName = "nodegc.io"
	// Version is the only version of the configuration API so far.
	Version = "v1alpha1"
	// APIVersion is the apiVersion a NodeGCConfiguration document must carry.
	APIVersion = GroupName + "/" + Version
	// Kind is the kind of the nodegc configuration document.
	Kind = "NodeGCConfiguration"

	// KubeletAPIVersion and KubeletKind identify a KubeletConfiguration document
	// whose image GC, runtime endpoint and pod log fields nodegc honours.
	KubeletAPIVersion = "kubelet.config.k8s.io/v1beta1"
	KubeletKind       = "KubeletConfiguration"
)

// NodeGCConfiguration configures every part of nodegc: the image and container
// GC of the node agent, the ownerReference garbage collector of the elected
// instance, leader election, API access and the agent's own endpoints.
//
// Fields that are pointers are pointers because their zero value is meaningful
// and must be told apart from "unset" so that defaulting does not overwrite it.
type NodeGCConfiguration struct {
	metav1.TypeMeta `json:",inline"`

	// NodeName is the name of the Node this agent collects for. Empty means: the
	// NODE_NAME environment variable, else the host name (as kubelet's
	// --hostname-override falls back to the host name). Default: "".
	NodeName string `json:"nodeName"`

	// StateDirectory holds nodegc's durable state (first-detected and last-used
	// times of images). Must be an absolute path. Default: /var/lib/nodegc.
	StateDirectory string `json:"stateDirectory"`

	// ContainerRuntimeEndpoint is the CRI runtime service endpoint, a unix://
	// URL. Mirrors kubelet's containerRuntimeEndpoint.
	// Default: unix:///run/containerd/containerd.sock.
	ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`

	// ImageServiceEndpoint is the CRI image service endpoint, a unix:// URL.
	// Empty means: the same as containerRuntimeEndpoint. Mirrors kubelet's
	// imageServiceEndpoint. Default: "".
	ImageServiceEndpoint string `json:"imageServiceEndpoint"`

	// RuntimeRequestTimeout bounds every CRI call (a Kubernetes duration).
	// Mirrors kubelet's runtimeRequestTimeout. Default: 2m; at least 1s,
	// at most 24h.
	RuntimeRequestTimeout metav1.Duration `json:"runtimeRequestTimeout"`

	// MetricsBindAddress is the host:port of the Prometheus /metrics endpoint
	// (and the owner GC debug graph). "0" disables it. Default: :10281.
	MetricsBindAddress string `json:"metricsBindAddress"`

	// HealthzBindAddress is the host:port of /healthz and /readyz. "0"
	// disables it. Default: :10280.
	HealthzBindAddress string `json:"healthzBindAddress"`

	// EnableProfilingHandler serves Go's profiles (net/http/pprof) under
	// /debug/pprof/ on metricsBindAddress. Mirrors kubelet's
	// enableProfilingHandler, but off by default: the metrics port is often
	// reachable from the whole cluster. Default: false.
	EnableProfilingHandler bool `json:"enableProfilingHandler"`

	// ClientConnection configures access to the API server for the node
	// agent (pod informer, Node events). An empty kubeconfig means the
	// in-cluster config; with neither (outside a cluster, or in a pod
	// without a service-account token: automountServiceAccountToken:
	// false) the agent runs node-only. The owner GC
	// uses ownerGC.kubeAPIQPS/kubeAPIBurst instead of qps/burst.
	// Defaults: qps 5, burst 10, contentType application/vnd.kubernetes.protobuf.
	ClientConnection componentbaseconfigv1alpha1.ClientConnectionConfiguration `json:"clientConnection"`

	// ImageGC configures the LRU image garbage collector.
	ImageGC ImageGCConfiguration `json:"imageGC"`

	// ContainerGC configures the dead container, sandbox and pod log GC.
	ContainerGC ContainerGCConfiguration `json:"containerGC"`

	// OwnerGC configures the cluster-wide ownerReference garbage collector.
	OwnerGC OwnerGCConfiguration `json:"ownerGC"`

	// LeaderElection configures the Lease election that picks the one
	// instance running the owner GC. The fields are those of every
	// Kubernetes component (LeaderElectionConfiguration).
	// Defaults: leaderElect true, leaseDuration 15s, renewDeadline 10s,
	// retryPeriod 2s, resourceLock leases, resourceName nodegc-owner-gc,
	// resourceNamespace nodegc.
	LeaderElection componentbaseconfigv1alpha1.LeaderElectionConfiguration `json:"leaderElection"`
}

// ImageGCConfiguration configures the image garbage collector.
type ImageGCConfiguration struct {
	// HighThresholdPercent is the image filesystem usage (percent) at or
	// above which image GC runs. 100 turns disk-threshold GC off (as in
	// kubelet); maximumGCAge still applies. Range 0..100.
	// Mirrors kubelet's imageGCHighThresholdPercent. Default: 85.
	HighThresholdPercent *int32 `json:"highThresholdPercent"`

	// LowThresholdPercent is the usage (percent) that image GC frees down
	// to. Range 0..100, less than highThresholdPercent.
	// Mirrors kubelet's imageGCLowThresholdPercent. Default: 80.
	LowThresholdPercent *int32 `json:"lowThresholdPercent"`

	// MinimumGCAge is how long an image must have been known to nodegc
	// before it may be removed. Mirrors kubelet's imageMinimumGCAge, but 0
	// is no minimum age here (with a warning), where the kubelet reads its
	// 0s as its default. Default: 2m.
	MinimumGCAge *metav1.Duration `json:"minimumGCAge"`

	// MaximumGCAge removes an image unused for longer than this, whatever
	// the disk usage (reason "age"). 0 turns it off; otherwise it must be
	// greater than minimumGCAge. Mirrors kubelet's imageMaximumGCAge.
	// Default: 0.
	MaximumGCAge *metav1.Duration `json:"maximumGCAge"`

	// Period is the interval of the full periodic sweep (max-age and
	// threshold). kubelet uses a fixed 5m. Default: 5m.
	Period metav1.Duration `json:"period"`

	// DiskCheckInterval is how often the image filesystem usage is read; a
	// GC starts as soon as usage reaches highThresholdPercent, or earlier
	// when fillRateHorizon says the kubelet's eviction threshold is near. A
	// check is one statfs(2). nodegc only. Default: 1s.
	DiskCheckInterval metav1.Duration `json:"diskCheckInterval"`

	// ContainerEvents subscribes to the runtime's CRI container event
	// stream (GetContainerEvents) to keep image last-used times, instead
	// of listing the containers every diskCheckInterval. Off by default:
	// containerd 2.x blocks every call that publishes a container event
	// (CreateContainer, StartContainer, StopContainer, RemoveContainer)
	// while a subscriber does not read, so a nodegc that is stopped or
	// frozen (SIGSTOP, a cgroup freeze, a paused VM, a wedged reader)
	// would stall container start-up on the whole node; the kubelet does
	// not subscribe by default (its evented PLEG is alpha). On, a
	// container that lives less than diskCheckInterval is dated too.
	// Runtimes without the stream (containerd 1.x) are polled either way.
	// nodegc only. Default: false.
	ContainerEvents bool `json:"containerEvents"`

	// FillRateHorizon starts a GC before highThresholdPercent is reached
	// when the image filesystem, filling at the rate of the last seconds,
	// would reach the kubelet's eviction threshold (the stricter of
	// evictionHard and evictionSoft) within this horizon (trigger
	// "projected"). Such a run frees down to
	// lowThresholdPercent as usage is projected to be at the end of the
	// horizon. 0 turns it off. nodegc only. Default: 30s.
	FillRateHorizon *metav1.Duration `json:"fillRateHorizon"`

	// EvictionHard are the kubelet's hard eviction thresholds, in the
	// kubelet's syntax: signal to a percentage ("15%") or a quantity
	// ("2Gi") of available space. nodegc evicts nothing; it reads
	// "imagefs.available" and "nodefs.available" (the stricter of the two,
	// as it cannot always tell whether the image filesystem is the
	// kubelet's nodefs) to start early (fillRateHorizon) and to warn at
	// start when highThresholdPercent would let the kubelet evict first.
	// Other signals are accepted and ignored. Taken from the
	// KubeletConfiguration document's evictionHard when this is unset; an
	// empty map means the kubelet does not evict on disk. Default: the
	// kubelet's, imagefs.available 15% and nodefs.available 10%.
	EvictionHard map[string]string `json:"evictionHard"`

	// EvictionSoft are the kubelet's soft eviction thresholds, in the same
	// syntax: the kubelet starts evicting pods once one has been met for
	// its evictionSoftGracePeriod. nodegc reads them as it reads
	// evictionHard, and for each signal takes the stricter of the two:
	// it frees space before the grace period even starts. Taken from the
	// KubeletConfiguration document's evictionSoft when this is unset.
	// Default: none, as in the kubelet.
	EvictionSoft map[string]string `json:"evictionSoft"`

	// Exclude lists image reference patterns, written as for docker pull,
	// familiar or fully qualified ("nginx:*", "registry.k8s.io/pause",
	// "**/critical-agent:*", "127.0.0.1:*/team/app:v1",
	// "sha256:0123abcd*"). Pattern and image names are both normalised
	// (docker.io/library/...) before matching every tag, digest and the ID
	// of an image; a matching image is never removed. "*" stays within a
	// path component, "**" as a whole component spans any number of them, a
	// pattern without tag or digest covers the whole repository. Invalid
	// wildcard syntax is an error; a pattern that can never match a valid
	// reference is a warning. README "Exclusion patterns" has every rule.
	// nodegc only. Default: none.
	Exclude []string `json:"exclude"`

	// KeepNewestPerRepository keeps the N most recently used images of
	// every repository, by their tags and digests (tagged images first),
	// whatever the disk usage. 0 turns it off. nodegc only.
	// Default: 0.
	KeepNewestPerRepository int32 `json:"keepNewestPerRepository"`

	// DryRun computes and reports the plan but removes nothing.
	// Default: false.
	DryRun bool `json:"dryRun"`
}

// ContainerAgeReference says from which moment a dead container's age counts.
type ContainerAgeReference string

const (
	// AgeFromCreation counts age from the container's creation, as kubelet does.
	AgeFromCreation ContainerAgeReference = "Created"
	// AgeFromExit counts age from the container's exit.
	AgeFromExit ContainerAgeReference = "Exited"
)

// ContainerGCConfiguration configures the dead container, sandbox and pod log
// directory garbage collector.
type ContainerGCConfiguration struct {
	// MinAge is the minimum age of a dead container before it may be
	// removed. Mirrors kubelet's --minimum-container-ttl-duration.
	// Default: 0.
	MinAge *metav1.Duration `json:"minAge"`

	// MinAgeFrom says whether ages count from the container's creation
	// ("Created", kubelet's behaviour) or from its exit ("Exited"). An
	// exited container the runtime gives no exit time for counts from when
	// nodegc first saw it exited. Default: Created.
	MinAgeFrom ContainerAgeReference `json:"minAgeFrom"`

	// MaxAge removes dead containers older than this, except the newest dead
	// container of each live pod's container. 0 turns it off; otherwise it
	// must be greater than minAge. nodegc only. Default: 0.
	MaxAge *metav1.Duration `json:"maxAge"`

	// MaxPerPodContainer is the number of dead containers kept per (pod,
	// container name); negative means no limit. Mirrors kubelet's
	// --maximum-dead-containers-per-container. Default: 1.
	MaxPerPodContainer *int32 `json:"maxPerPodContainer"`

	// MaxContainers is the number of dead containers kept on the node;
	// negative means no limit. Mirrors kubelet's --maximum-dead-containers.
	// Default: -1.
	MaxContainers *int32 `json:"maxContainers"`

	// Period is the interval between container GC runs. kubelet uses a
	// fixed 1m. Default: 1m.
	Period metav1.Duration `json:"period"`

	// PodLogsDirectory holds the pod log directories
	// (NAMESPACE_NAME_UID). Mirrors kubelet's podLogsDir.
	// Default: /var/log/pods.
	PodLogsDirectory string `json:"podLogsDirectory"`

	// ContainerLogsDirectory holds the kubelet's NAME_NAMESPACE_CONTAINER-ID.log
	// links into podLogsDirectory. Default: /var/log/containers.
	ContainerLogsDirectory string `json:"containerLogsDirectory"`

	// DryRun computes and reports the plan but removes nothing.
	// Default: false.
	DryRun bool `json:"dryRun"`
}

// GroupResource names a resource to ignore, as kube-controller-manager's
// gcIgnoredResources entries do.
type GroupResource struct {
	// Group is the API group; "" is the core group.
	Group string `json:"group"`
	// Resource is the plural resource name, e.g. "events".
	Resource string `json:"resource"`
}

// OwnerGCConfiguration configures the ownerReference garbage collector.
type OwnerGCConfiguration struct {
	// EnableGarbageCollector turns the owner GC on. Mirrors
	// kube-controller-manager's enableGarbageCollector. Default: true.
	EnableGarbageCollector *bool `json:"enableGarbageCollector"`

	// ConcurrentGCSyncs is the number of workers that act on the graph.
	// Mirrors kube-controller-manager's concurrentGCSyncs. Default: 20.
	ConcurrentGCSyncs int32 `json:"concurrentGCSyncs"`

	// GCIgnoredResources are never watched nor collected. Mirrors
	// kube-controller-manager's gcIgnoredResources. Entries are named as
	// discovery names them: the group alone ("" for the core group) and
	// the plural, lower-case resource; a list replaces the default.
	// Default: [{group: "", resource: events}, {group: events.k8s.io, resource: events}].
	GCIgnoredResources []GroupResource `json:"gcIgnoredResources"`

	// KubeAPIQPS is the sustained request rate of the owner GC's API client.
	// kube-controller-manager's collector runs at twice its --kube-api-qps
	// (20), so the default matches its effective rate. A negative value
	// turns the client-side rate limit off, as client-go's rest.Config
	// does: the API server's Priority and Fairness then paces the collector
	// (what SIG API Machinery recommends, and what controller-runtime now
	// does by default). Default: 40.
	KubeAPIQPS float32 `json:"kubeAPIQPS"`

	// KubeAPIBurst is the burst of the owner GC's API client; unused when
	// kubeAPIQPS is negative. Default: 60.
	KubeAPIBurst int32 `json:"kubeAPIBurst"`

	// DiscoveryResyncPeriod is how often API discovery is refreshed so that
	// new resources (CRDs) get monitors. Mirrors kube-controller-manager's
	// fixed 30s. Default: 30s.
	DiscoveryResyncPeriod metav1.Duration `json:"discoveryResyncPeriod"`

	// DryRun decides and records every action but writes nothing.
	// Default: false.
	DryRun bool `json:"dryRun"`

	// UnsyncedResourceHold bounds how long the owner GC keeps an owner's
	// orphan or foregroundDeletion finalizer while a resource that could
	// hold the owner's dependents cannot be listed or watched, or is not
	// yet synced: finishing then could miss a dependent (an orphaned one
	// would later be deleted, a foreground one would outlive its owner).
	// After the bound the owner GC finishes as kube-controller-manager does,
	// with a Warning Event. 0 does not hold (kube-controller-manager's
	// behaviour). Default: 10m.
	UnsyncedResourceHold *metav1.Duration `json:"unsyncedResourceHold"`

	// StuckDeletionThreshold is how long an object with the
	// foregroundDeletion or orphan finalizer may make no progress before
	// the owner GC reports it stuck: a Warning Event naming what blocks it,
	// and nodegc_owner_gc_stuck_deletions. 0 turns the check off.
	// Default: 15m.
	StuckDeletionThreshold *metav1.Duration `json:"stuckDeletionThreshold"`
}
