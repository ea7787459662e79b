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
	DefaultDiskCheckInterval           = 10 * time.Second

	DefaultMaxPerPodContainer     = 1
	DefaultMaxContainers          = -1
	DefaultContainerGCPeriod      = time.Minute
	DefaultPodLogsDirectory       = "/var/log/pods"
	DefaultContainerLogsDirectory = "/var/log/containers"

	DefaultConcurrentGCSyncs     = 20
	DefaultOwnerGCQPS            = 40
	DefaultOwnerGCBurst          = 60
	DefaultDiscoveryResyncPeriod = 30 * time.Second

	DefaultLeaseDuration     = 15 * time.Second
	DefaultRenewDeadline     = 10 * time.Second
	DefaultRetryPeriod       = 2 * time.Second
	DefaultResourceLock      = "leases"
	DefaultResourceName      = "nodegc-owner-gc"
	DefaultResourceNamespace = "nodegc"
)

// DefaultIgnoredResources are the resources the owner GC skips when
// gcIgnoredResources is unset: events, as in kube-controller-manager.
func DefaultIgnoredResources() []GroupResource {
	return []GroupResource{
		{Group: "", Resource: "events"},
		{Group: "events.k8s.io", Resource: "events"},
	}
}

// SetDefaults fills every unset field of c with its default. Set fields,
// including pointer fields set to their zero value, are left alone.
func SetDefaults(c *NodeGCConfiguration) {
	c.APIVersion = APIVersion
	c.Kind = Kind
	setString(&c.StateDirectory, DefaultStateDirectory)
	setString(&c.ContainerRuntimeEndpoint, DefaultContainerRuntimeEndpoint)
	setDuration(&c.RuntimeRequestTimeout, DefaultRuntimeRequestTimeout)
	setString(&c.MetricsBindAddress, DefaultMetricsBindAddress)
	setString(&c.HealthzBindAddress, DefaultHealthzBindAddress)

	cc := &c.ClientConnection
	if cc.QPS == 0 {
		cc.QPS = DefaultClientQPS
	}
	if cc.Burst == 0 {
		cc.Burst = DefaultClientBurst
	}
	setString(&cc.ContentType, DefaultClientContentType)

	ig := &c.ImageGC
	setPtr(&ig.HighThresholdPercent, DefaultImageGCHighThresholdPercent)
	setPtr(&ig.LowThresholdPercent, DefaultImageGCLowThresholdPercent)
	setPtr(&ig.MinimumGCAge, metav1.Duration{Duration: DefaultImageMinimumGCAge})
	setPtr(&ig.MaximumGCAge, metav1.Duration{})
	setDuration(&ig.Period, DefaultImageGCPeriod)
	setDuration(&ig.DiskCheckInterval, DefaultDiskCheckInterval)
	if ig.Exclude == nil {
		ig.Exclude = []string{}
	}

	cg := &c.ContainerGC
	setPtr(&cg.MinAge, metav1.Duration{})
	if cg.MinAgeFrom == "" {
		cg.MinAgeFrom = AgeFromCreation
	}
	setPtr(&cg.MaxAge, metav1.Duration{})
	setPtr(&cg.MaxPerPodContainer, DefaultMaxPerPodContainer)
	setPtr(&cg.MaxContainers, DefaultMaxContainers)
	setDuration(&cg.Period, DefaultContainerGCPeriod)
	setString(&cg.PodLogsDirectory, DefaultPodLogsDirectory)
	setString(&cg.ContainerLogsDirectory, DefaultContainerLogsDirectory)

	og := &c.OwnerGC
	setPtr(&og.EnableGarbageCollector, true)
	if og.ConcurrentGCSyncs == 0 {
		og.ConcurrentGCSyncs = DefaultConcurrentGCSyncs
	}
	if og.GCIgnoredResources == nil {
		og.GCIgnoredResources = DefaultIgnoredResources()
	}
	if og.KubeAPIQPS == 0 {
		og.KubeAPIQPS = DefaultOwnerGCQPS
	}
	if og.KubeAPIBurst == 0 {
		og.KubeAPIBurst = DefaultOwnerGCBurst
	}
	setDuration(&og.DiscoveryResyncPeriod, DefaultDiscoveryResyncPeriod)

	le := &c.LeaderElection
	setPtr(&le.LeaderElect, true)
	setDuration(&le.LeaseDuration, DefaultLeaseDuration)
	setDuration(&le.RenewDeadline, DefaultRenewDeadline)
	setDuration(&le.RetryPeriod, DefaultRetryPeriod)
	setString(&le.ResourceLock, DefaultResourceLock)
	setString(&le.ResourceName, DefaultResourceName)
	setString(&le.ResourceNamespace, DefaultResourceNamespace)
}

// Defaulted returns a configuration with every field at its default.
func Defaulted() *NodeGCConfiguration {
	c := &NodeGCConfiguration{}
	SetDefaults(c)
	return c
}

func setString(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func setDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

func setPtr[T any](p **T, def T) {
	if *p == nil {
		*p = ptr.To(def)
	}
}
