package config

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Default values, named so that code and documentation share them.
const (
	DefaultStateDirectory           = "/var/lib/nodegc"
	DefaultContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	DefaultRuntimeRequestTimeout    = 2 * time.Minute
	DefaultMetricsBindAddress       = ":10281"
	DefaultHealthzBindAddress       = ":10280"

	DefaultClientQPS         = 5
	DefaultClientBurst       = 10
	DefaultClientContentType = "application/vnd.kubernetes.protobuf"

	DefaultImageGCHighThresholdPercent = 85
	DefaultImageGCLowThresholdPercent  = 80
	DefaultImageMinimumGCAge           = 2 * time.Minute
	DefaultImageGCPeriod               = 5 * time.Minute
	DefaultDiskCheckInterval           = time.Second
	DefaultFillRateHorizon             = 30 * time.Second

	DefaultMaxPerPodContainer     = 1
	DefaultMaxContainers          = -1
	DefaultContainerGCPeriod      = time.Minute
	DefaultPodLogsDirectory       = "/var/log/pods"
	DefaultContainerLogsDirectory = "/var/log/containers"

	DefaultConcurrentGCSyncs     = 20
	DefaultOwnerGCQPS            = 40
	DefaultOwnerGCBurst          = 60
	DefaultDiscoveryResyncPeriod = 30 * time.Second
	DefaultUnsyncedResourceHold  = 10 * time.Minute
	DefaultStuckDeletion         = 15 * time.Minute

	DefaultLeaseDuration     = 15 * time.Second
	DefaultRenewDeadline     = 10 * time.Second
	DefaultRetryPeriod       = 2 * time.Second
	DefaultResourceLock      = "leases"
	DefaultResourceName      = "nodegc-owner-gc"
	DefaultResourceNamespace = "nodegc"
)

// FillRateWindow is how far back the image GC's fill rate looks
// (pkg/images, fillWindow): it takes the rate from three disk readings
// within it at least, so fillRateHorizon needs diskCheckInterval under
// half of it (or the runtime's writes followed).
const FillRateWindow = 5 * time.Second

// DefaultIgnoredResources are the resources the owner GC skips when
// gcIgnoredResources is unset: events, as in kube-controller-manager.
func DefaultIgnoredResources() []GroupResource {
	return []GroupResource{
		{Group: "", Resource: "events"},
		{Group: "events.k8s.io", Resource: "events"},
	}
}

// Eviction signals of the kubelet that nodegc reads (imageGC.evictionHard
// and imageGC.evictionSoft).
const (
	SignalImageFsAvailable = "imagefs.available"
	SignalNodeFsAvailable  = "nodefs.available"
)

// DefaultEvictionHard are the kubelet's default hard eviction thresholds for
// disk space (KubeletConfiguration evictionHard).
func DefaultEvictionHard() map[string]string {
	return map[string]string{SignalImageFsAvailable: "15%", SignalNodeFsAvailable: "10%"}
}

// SetDefaults fills every unset field of c with its default. Set fields,
// including pointer fields set to their zero value, are left alone.
func SetDefaults(c *NodeGCConfiguration) {
	c.APIVersion = APIVersion
	c.Kind = Kind
	setZero(&c.StateDirectory, DefaultStateDirectory)
	setZero(&c.ContainerRuntimeEndpoint, DefaultContainerRuntimeEndpoint)
	setDuration(&c.RuntimeRequestTimeout, DefaultRuntimeRequestTimeout)
	setZero(&c.MetricsBindAddress, DefaultMetricsBindAddress)
	setZero(&c.HealthzBindAddress, DefaultHealthzBindAddress)

	cc := &c.ClientConnection
	setZero(&cc.QPS, DefaultClientQPS)
	setZero(&cc.Burst, DefaultClientBurst)
	setZero(&cc.ContentType, DefaultClientContentType)

	ig := &c.ImageGC
	setPtr(&ig.HighThresholdPercent, DefaultImageGCHighThresholdPercent)
	setPtr(&ig.LowThresholdPercent, DefaultImageGCLowThresholdPercent)
	setPtr(&ig.MinimumGCAge, metav1.Duration{Duration: DefaultImageMinimumGCAge})
	setPtr(&ig.MaximumGCAge, metav1.Duration{})
	setDuration(&ig.Period, DefaultImageGCPeriod)
	setDuration(&ig.DiskCheckInterval, DefaultDiskCheckInterval)
	setPtr(&ig.FillRateHorizon, metav1.Duration{Duration: DefaultFillRateHorizon})
	if ig.EvictionHard == nil {
		ig.EvictionHard = DefaultEvictionHard()
	}
	if ig.EvictionSoft == nil {
		ig.EvictionSoft = map[string]string{}
	}
	if ig.Exclude == nil {
		ig.Exclude = []string{}
	}

	cg := &c.ContainerGC
	setPtr(&cg.MinAge, metav1.Duration{})
	setZero(&cg.MinAgeFrom, AgeFromCreation)
	setPtr(&cg.MaxAge, metav1.Duration{})
	setPtr(&cg.MaxPerPodContainer, DefaultMaxPerPodContainer)
	setPtr(&cg.MaxContainers, DefaultMaxContainers)
	setDuration(&cg.Period, DefaultContainerGCPeriod)
	setZero(&cg.PodLogsDirectory, DefaultPodLogsDirectory)
	setZero(&cg.ContainerLogsDirectory, DefaultContainerLogsDirectory)

	og := &c.OwnerGC
	setPtr(&og.EnableGarbageCollector, true)
	setZero(&og.ConcurrentGCSyncs, DefaultConcurrentGCSyncs)
	if og.GCIgnoredResources == nil {
		og.GCIgnoredResources = DefaultIgnoredResources()
	}
	setZero(&og.KubeAPIQPS, DefaultOwnerGCQPS)
	setZero(&og.KubeAPIBurst, DefaultOwnerGCBurst)
	setDuration(&og.DiscoveryResyncPeriod, DefaultDiscoveryResyncPeriod)
	setPtr(&og.UnsyncedResourceHold, metav1.Duration{Duration: DefaultUnsyncedResourceHold})
	setPtr(&og.StuckDeletionThreshold, metav1.Duration{Duration: DefaultStuckDeletion})

	le := &c.LeaderElection
	setPtr(&le.LeaderElect, true)
	setDuration(&le.LeaseDuration, DefaultLeaseDuration)
	setDuration(&le.RenewDeadline, DefaultRenewDeadline)
	setDuration(&le.RetryPeriod, DefaultRetryPeriod)
	setZero(&le.ResourceLock, DefaultResourceLock)
	setZero(&le.ResourceName, DefaultResourceName)
	setZero(&le.ResourceNamespace, DefaultResourceNamespace)
}

// Defaulted returns a configuration with every field at its default.
func Defaulted() *NodeGCConfiguration {
	c := &NodeGCConfiguration{}
	SetDefaults(c)
	return c
}

// setZero sets *p to def when it is the zero value (unset).
func setZero[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

func setDuration(d *metav1.Duration, def time.Duration) { setZero(&d.Duration, def) }

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}
