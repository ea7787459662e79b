package config

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// TestValidate mutates a defaulted configuration and checks exactly which
// fields are reported, with which error type.
func TestValidate(t *testing.T) {
	cases := map[string]struct {
		mutate func(*NodeGCConfiguration)
		want   []string // "field: type"
	}{
		"defaults are valid": {
			mutate: func(*NodeGCConfiguration) {},
		},
		"wrong apiVersion and kind": {
			mutate: func(c *NodeGCConfiguration) { c.APIVersion = "nodegc.io/v1"; c.Kind = "Config" },
			want:   []string{"apiVersion: Unsupported value", "kind: Unsupported value"},
		},
		"node name must be a DNS subdomain": {
			mutate: func(c *NodeGCConfiguration) { c.NodeName = "Node_1" },
			want:   []string{"nodeName: Invalid value"},
		},
		"relative state directory": {
			mutate: func(c *NodeGCConfiguration) { c.StateDirectory = "var/lib/nodegc" },
			want:   []string{"stateDirectory: Invalid value"},
		},
		"relative kubeconfig: read from the working directory, not the file's": {
			mutate: func(c *NodeGCConfiguration) { c.ClientConnection.Kubeconfig = "kc.yaml" },
			want:   []string{"clientConnection.kubeconfig: Invalid value"},
		},
		"absolute kubeconfig": {
			mutate: func(c *NodeGCConfiguration) { c.ClientConnection.Kubeconfig = "/etc/nodegc/kubeconfig" },
		},
		"runtime endpoint must be unix://": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerRuntimeEndpoint = "tcp://127.0.0.1:1234" },
			want:   []string{"containerRuntimeEndpoint: Invalid value"},
		},
		"runtime endpoint as a bare path, as the kubelet reads it": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerRuntimeEndpoint = "/run/containerd/containerd.sock" },
		},
		"runtime endpoint as a relative bare path": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerRuntimeEndpoint = "run/containerd/containerd.sock" },
			want:   []string{"containerRuntimeEndpoint: Invalid value"},
		},
		"runtime endpoint needs an absolute path": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerRuntimeEndpoint = "unix://run/containerd.sock" },
			want:   []string{"containerRuntimeEndpoint: Invalid value"},
		},
		"runtime endpoint required": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerRuntimeEndpoint = "" },
			want:   []string{"containerRuntimeEndpoint: Required value"},
		},
		"image endpoint is optional but must be unix:// when set": {
			mutate: func(c *NodeGCConfiguration) { c.ImageServiceEndpoint = "tcp://127.0.0.1:1234" },
			want:   []string{"imageServiceEndpoint: Invalid value"},
		},
		"separate image endpoint": {
			mutate: func(c *NodeGCConfiguration) { c.ImageServiceEndpoint = "unix:///run/images.sock" },
		},
		"negative runtime request timeout": {
			mutate: func(c *NodeGCConfiguration) { c.RuntimeRequestTimeout = dur(-time.Second) },
			want:   []string{"runtimeRequestTimeout: Invalid value"},
		},
		"bind addresses": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = "10281"; c.HealthzBindAddress = "example.com:80" },
			want:   []string{"metricsBindAddress: Invalid value", "healthzBindAddress: Invalid value"},
		},
		"bind address port out of range": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = ":70000" },
			want:   []string{"metricsBindAddress: Invalid value"},
		},
		"bind addresses disabled or explicit": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = "0"; c.HealthzBindAddress = "127.0.0.1:8080" },
		},
		// Two listeners cannot share a port on overlapping addresses;
		// written the same, the two share one listener.
		"bind addresses on one port, written apart": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = "0.0.0.0:19480"; c.HealthzBindAddress = ":19480" },
			want:   []string{"healthzBindAddress: Invalid value"},
		},
		"bind addresses on one port, loopback written two ways": {
			mutate: func(c *NodeGCConfiguration) {
				c.MetricsBindAddress = "localhost:9000"
				c.HealthzBindAddress = "127.0.0.1:9000"
			},
			want: []string{"healthzBindAddress: Invalid value"},
		},
		"bind addresses on one port, written the same": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = ":19480"; c.HealthzBindAddress = ":19480" },
		},
		"bind addresses on one port, distinct hosts": {
			mutate: func(c *NodeGCConfiguration) {
				c.MetricsBindAddress = "127.0.0.1:9000"
				c.HealthzBindAddress = "127.0.0.2:9000"
			},
		},
		"bind addresses on port 0": {
			mutate: func(c *NodeGCConfiguration) { c.MetricsBindAddress = ":0"; c.HealthzBindAddress = "0.0.0.0:0" },
		},
		"client qps and burst": {
			mutate: func(c *NodeGCConfiguration) { c.ClientConnection.QPS = -1; c.ClientConnection.Burst = -2 },
			want:   []string{"clientConnection.qps: Invalid value", "clientConnection.burst: Invalid value"},
		},
		"thresholds out of range": {
			mutate: func(c *NodeGCConfiguration) {
				c.ImageGC.HighThresholdPercent = ptr.To[int32](101)
				c.ImageGC.LowThresholdPercent = ptr.To[int32](-1)
			},
			want: []string{"imageGC.highThresholdPercent: Invalid value", "imageGC.lowThresholdPercent: Invalid value"},
		},
		"low must be below high": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.LowThresholdPercent = ptr.To[int32](85) },
			want:   []string{"imageGC.lowThresholdPercent: Invalid value"},
		},
		"high 100 turns threshold GC off and stays valid": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.HighThresholdPercent = ptr.To[int32](100) },
		},
		"zero thresholds are meaningful": {
			mutate: func(c *NodeGCConfiguration) {
				c.ImageGC.HighThresholdPercent = ptr.To[int32](1)
				c.ImageGC.LowThresholdPercent = ptr.To[int32](0)
			},
		},
		"negative image ages": {
			mutate: func(c *NodeGCConfiguration) {
				c.ImageGC.MinimumGCAge = ptr.To(dur(-time.Minute))
				c.ImageGC.MaximumGCAge = ptr.To(dur(-time.Minute))
			},
			want: []string{"imageGC.minimumGCAge: Invalid value", "imageGC.maximumGCAge: Invalid value"},
		},
		"max age must exceed min age": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.MaximumGCAge = ptr.To(dur(time.Minute)) },
			want:   []string{"imageGC.maximumGCAge: Invalid value"},
		},
		"max age above min age": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.MaximumGCAge = ptr.To(dur(time.Hour)) },
		},
		// An interval of 1ns makes a statfs (or list) loop of every core,
		// a timeout of 1ns fails every runtime call: refused with a bound
		// that says what is sane.
		"intervals under their floor": {
			mutate: func(c *NodeGCConfiguration) {
				c.RuntimeRequestTimeout = dur(time.Nanosecond)
				c.ImageGC.Period = dur(999 * time.Millisecond)
				c.ImageGC.DiskCheckInterval = dur(99 * time.Millisecond)
				c.ContainerGC.Period = dur(time.Nanosecond)
				c.OwnerGC.DiscoveryResyncPeriod = dur(time.Millisecond)
			},
			want: []string{
				"runtimeRequestTimeout: Invalid value",
				"imageGC.period: Invalid value",
				"imageGC.diskCheckInterval: Invalid value",
				"containerGC.period: Invalid value",
				"ownerGC.discoveryResyncPeriod: Invalid value",
			},
		},
		"intervals at their floor": {
			mutate: func(c *NodeGCConfiguration) {
				c.RuntimeRequestTimeout = dur(time.Second)
				c.ImageGC.Period = dur(time.Second)
				c.ImageGC.DiskCheckInterval = dur(100 * time.Millisecond)
				c.ContainerGC.Period = dur(time.Second)
				c.OwnerGC.DiscoveryResyncPeriod = dur(time.Second)
			},
		},
		"image periods must be positive": {
			mutate: func(c *NodeGCConfiguration) {
				c.ImageGC.Period = dur(-time.Minute)
				c.ImageGC.DiskCheckInterval = dur(-time.Second)
			},
			want: []string{"imageGC.period: Invalid value", "imageGC.diskCheckInterval: Invalid value"},
		},
		"bad exclusion globs": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.Exclude = []string{"ok/*:*", "bad[", " "} },
			want:   []string{"imageGC.exclude[1]: Invalid value", "imageGC.exclude[2]: Invalid value"},
		},
		"negative keep newest": {
			mutate: func(c *NodeGCConfiguration) { c.ImageGC.KeepNewestPerRepository = -1 },
			want:   []string{"imageGC.keepNewestPerRepository: Invalid value"},
		},
		"container ages": {
			mutate: func(c *NodeGCConfiguration) {
				c.ContainerGC.MinAge = ptr.To(dur(time.Hour))
				c.ContainerGC.MaxAge = ptr.To(dur(time.Minute))
			},
			want: []string{"containerGC.maxAge: Invalid value"},
		},
		"negative container min age": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerGC.MinAge = ptr.To(dur(-time.Hour)) },
			want:   []string{"containerGC.minAge: Invalid value"},
		},
		"min age reference": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerGC.MinAgeFrom = "Started" },
			want:   []string{"containerGC.minAgeFrom: Unsupported value"},
		},
		"negative container counts mean no limit": {
			mutate: func(c *NodeGCConfiguration) {
				c.ContainerGC.MaxPerPodContainer = ptr.To[int32](-1)
				c.ContainerGC.MaxContainers = ptr.To[int32](-5)
			},
		},
		"zero dead containers per pod container would drop the newest": {
			mutate: func(c *NodeGCConfiguration) { c.ContainerGC.MaxPerPodContainer = ptr.To[int32](0) },
			want:   []string{"containerGC.maxPerPodContainer: Invalid value"},
		},
		"container period and directories": {
			mutate: func(c *NodeGCConfiguration) {
				c.ContainerGC.Period = dur(-time.Second)
				c.ContainerGC.PodLogsDirectory = "logs"
				c.ContainerGC.ContainerLogsDirectory = ""
			},
			want: []string{"containerGC.period: Invalid value", "containerGC.podLogsDirectory: Invalid value",
				"containerGC.containerLogsDirectory: Required value"},
		},
		"owner GC workers, client and discovery": {
			mutate: func(c *NodeGCConfiguration) {
				c.OwnerGC.ConcurrentGCSyncs = -1
				c.OwnerGC.KubeAPIQPS = 0
				c.OwnerGC.KubeAPIBurst = -1
				c.OwnerGC.DiscoveryResyncPeriod = dur(-time.Second)
			},
			want: []string{"ownerGC.concurrentGCSyncs: Invalid value", "ownerGC.kubeAPIQPS: Invalid value",
				"ownerGC.kubeAPIBurst: Invalid value", "ownerGC.discoveryResyncPeriod: Invalid value"},
		},
		"negative kubeAPIQPS turns the client-side rate limit off": {
			mutate: func(c *NodeGCConfiguration) { c.OwnerGC.KubeAPIQPS = -1 },
		},
		"kubeAPIQPS not a number": {
			mutate: func(c *NodeGCConfiguration) { c.OwnerGC.KubeAPIQPS = float32(math.NaN()) },
			want:   []string{"ownerGC.kubeAPIQPS: Invalid value"},
		},
		"ignored resources": {
			mutate: func(c *NodeGCConfiguration) {
				c.OwnerGC.GCIgnoredResources = []GroupResource{{Group: "apps"}, {Resource: "events"}, {Resource: "events"}}
			},
			want: []string{"ownerGC.gcIgnoredResources[0].resource: Required value", "ownerGC.gcIgnoredResources[2]: Duplicate value"},
		},
		"empty ignored resources is allowed": {
			mutate: func(c *NodeGCConfiguration) { c.OwnerGC.GCIgnoredResources = []GroupResource{} },
		},
		"lease durations inconsistent": {
			mutate: func(c *NodeGCConfiguration) {
				c.LeaderElection.LeaseDuration = dur(10 * time.Second)
				c.LeaderElection.RetryPeriod = dur(10 * time.Second)
			},
			want: []string{"leaderElection.leaseDuration: Invalid value", "leaderElection.renewDeadline: Invalid value"},
		},
		"lease duration in whole seconds": {
			mutate: func(c *NodeGCConfiguration) {
				c.LeaderElection.LeaseDuration = dur(10900 * time.Millisecond) // the Lease says 10s
				c.LeaderElection.RenewDeadline = dur(10 * time.Second)
			},
			want: []string{"leaderElection.leaseDuration: Invalid value"},
		},
		"renew deadline within client-go's jitter of the retry period": {
			mutate: func(c *NodeGCConfiguration) {
				c.LeaderElection.RenewDeadline = dur(2300 * time.Millisecond)
				c.LeaderElection.RetryPeriod = dur(2 * time.Second)
			},
			want: []string{"leaderElection.renewDeadline: Invalid value"},
		},
		// 1.2 x a retry period near time.Duration's range overflows it:
		// before, the product wrapped negative and the rule passed.
		"retry period whose jitter overflows a duration": {
			mutate: func(c *NodeGCConfiguration) { c.LeaderElection.RetryPeriod = dur(2562047 * time.Hour) },
			want:   []string{"leaderElection.renewDeadline: Invalid value"},
		},
		"lease lock and names": {
			mutate: func(c *NodeGCConfiguration) {
				c.LeaderElection.ResourceLock = "endpoints"
				c.LeaderElection.ResourceName = ""
				c.LeaderElection.ResourceNamespace = "Kube_System"
			},
			want: []string{"leaderElection.resourceLock: Unsupported value", "leaderElection.resourceName: Invalid value",
				"leaderElection.resourceNamespace: Invalid value"},
		},
		"leader election off skips its checks": {
			mutate: func(c *NodeGCConfiguration) {
				c.LeaderElection.LeaderElect = ptr.To(false)
				c.LeaderElection.ResourceLock = "endpoints"
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Defaulted()
			tc.mutate(c)
			var got []string
			for _, e := range Validate(c) {
				got = append(got, e.Field+": "+e.Type.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Validate() fields (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateUnsetPointersAreRequired(t *testing.T) {
	c := Defaulted()
	c.ImageGC.HighThresholdPercent = nil
	c.ImageGC.MinimumGCAge = nil
	c.ContainerGC.MaxPerPodContainer = nil
	c.ContainerGC.MaxContainers = nil
	c.OwnerGC.EnableGarbageCollector = nil
	c.LeaderElection.LeaderElect = nil
	var got []string
	for _, e := range Validate(c) {
		got = append(got, e.Field+": "+e.Type.String())
	}
	want := []string{
		"imageGC.highThresholdPercent: Required value",
		"imageGC.minimumGCAge: Required value",
		"containerGC.maxPerPodContainer: Required value",
		"containerGC.maxContainers: Required value",
		"ownerGC.enableGarbageCollector: Required value",
		"leaderElection.leaderElect: Required value",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Validate() fields (-want +got):\n%s", diff)
	}
}

func TestLowThresholdMessageNamesHigh(t *testing.T) {
	c := Defaulted()
	c.ImageGC.LowThresholdPercent = ptr.To[int32](90)
	errs := Validate(c)
	if len(errs) != 1 {
		t.Fatalf("Validate() = %v, want one error", errs)
	}
	want := "imageGC.lowThresholdPercent: Invalid value: 90: must be less than highThresholdPercent (85)"
	if got := errs[0].Error(); got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

// TestRuntimeRequestTimeoutCeiling: a runtimeRequestTimeout past a day is
// a mistake (the kubelet's default is 2m, and it bounds every CRI call),
// and near the longest duration the deadlines made of it (the container
// GC's start grace, the stall watchdog's) wrapped to negative: refused,
// with the bound; a day is accepted.
func TestRuntimeRequestTimeoutCeiling(t *testing.T) {
	c := Defaulted()
	c.RuntimeRequestTimeout = dur(2562047*time.Hour + 47*time.Minute)
	want := `runtimeRequestTimeout: Invalid value: "2562047h47m0s": must be at most 24h0m0s`
	if got := Validate(c).ToAggregate(); got == nil || !strings.Contains(got.Error(), want) {
		t.Errorf("Validate() = %v with runtimeRequestTimeout 2562047h47m; want it to say %s", got, want)
	}
	c.RuntimeRequestTimeout = dur(24 * time.Hour)
	if errs := Validate(c); len(errs) > 0 {
		t.Errorf("Validate() = %v with runtimeRequestTimeout 24h; want it accepted", errs.ToAggregate())
	}
}

// TestIntervalFloorsSayTheFloor: a too-short interval's problem names the
// least value accepted.
func TestIntervalFloorsSayTheFloor(t *testing.T) {
	c := Defaulted()
	c.ImageGC.DiskCheckInterval = dur(99 * time.Millisecond)
	c.RuntimeRequestTimeout = dur(time.Nanosecond)
	got := Validate(c).ToAggregate().Error()
	for _, want := range []string{
		`imageGC.diskCheckInterval: Invalid value: "99ms": must be at least 100ms`,
		`runtimeRequestTimeout: Invalid value: "1ns": must be at least 1s`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Validate() = %s; want it to say %s", got, want)
		}
	}
}

// TestNodeNameWithCapitals: a nodeName with capitals (a
// --hostname-override copied from the kubelet's flags) is refused, as no
// Node can have it, with a message that says the kubelet registers the name
// lower-cased and what to write; a name lower-casing does not fix gets no
// such hint.
func TestNodeNameWithCapitals(t *testing.T) {
	c := Defaulted()
	c.NodeName = "Worker-1"
	errs := Validate(c)
	want := `the kubelet registers its node name lower-cased (--hostname-override=Worker-1 registers Node worker-1): write "worker-1"`
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), want) {
		t.Errorf("Validate(nodeName Worker-1) = %v, want one problem saying %q", errs, want)
	}
	c.NodeName = "Node_1"
	if errs := Validate(c); len(errs) == 0 || strings.Contains(errs.ToAggregate().Error(), "lower-cased") {
		t.Errorf("Validate(nodeName Node_1) = %v, want a problem without the lower-case hint", errs)
	}
}

// TestIgnoredResourcesAsOperatorsWriteThem: a gcIgnoredResources entry
// written as operators write a resource elsewhere (kubectl's "core" group,
// the core group's "v1", a group/version, a Kind, a CustomResourceDefinition's
// full name) names nothing discovery serves: it would match nothing, and
// the owner GC would watch and collect what it was meant to leave alone. So
// does a group that is no lower-case DNS subdomain (capitals, white space,
// a wildcard), or a resource with white space, a wildcard, a subresource's
// "/" or another character no resource name holds. Each is refused at its
// line, naming the field and what to write. A singular resource name
// cannot be told without discovery: it passes.
func TestIgnoredResourcesAsOperatorsWriteThem(t *testing.T) {
	for entry, want := range map[string][]string{
		"{group: core, resource: configmaps}": {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "core": the core group is "" here, as discovery names it: write group: ""`},
		"{group: v1, resource: configmaps}":   {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "v1": the core group is "" here, as discovery names it: write group: ""`},
		"{group: apps/v1, resource: deployments}": {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "apps/v1": a group/version: ` +
			`write the group alone, group: "apps" (an entry holds every version of its resource)`},
		"{group: core/v1, resource: pods}": {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "core/v1": a group/version: ` +
			`write the group alone, group: "" (an entry holds every version of its resource)`},
		"{group: '', resource: ConfigMap}": {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: "ConfigMap": a Kind, not a resource: ` +
			"write the plural, lower-case resource name as `kubectl api-resources` shows it (configmaps for ConfigMap)"},
		"{group: example.com, resource: widgets.example.com}": {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: "widgets.example.com": ` +
			`a CustomResourceDefinition's full name: give its group in group and its plural in resource: {group: example.com, resource: widgets}`},
		// Before, each of these was valid, and matched nothing (review r7 F2).
		"{group: Example.COM, resource: widgets}": {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "Example.COM": ` +
			`an API group is lower case, as discovery names it: write group: "example.com"`},
		`{group: "apps ", resource: deployments}`: {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "apps ": ` +
			`has white space around it, which no API group holds: write group: "apps"`},
		`{group: "*", resource: secrets}`: {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "*": ` +
			`no wildcards: an entry names one group and one resource; list each as its own entry`},
		`{group: "example com", resource: widgets}`: {`line 5: ownerGC.gcIgnoredResources[0].group: Invalid value: "example com": ` +
			`an API group is a DNS subdomain, as discovery names it: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		`{group: batch, resource: " jobs"}`: {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: " jobs": ` +
			`has white space around it, which no resource name holds: write resource: "jobs"`},
		`{group: example.com, resource: "*"}`: {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: "*": ` +
			`no wildcards: an entry names one group and one resource; list each as its own entry`},
		`{group: "", resource: pods/status}`: {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: "pods/status": ` +
			`a subresource: the owner GC watches resources, and an entry holds its subresources: write resource: "pods"`},
		`{group: "", resource: config_maps}`: {`line 5: ownerGC.gcIgnoredResources[0].resource: Invalid value: "config_maps": ` +
			"a resource name is lower-case letters, digits and \"-\", starting and ending with a letter or digit, as `kubectl api-resources` shows it"},
		"{group: apps, resource: deployment}":  nil,
		"{group: apps, resource: deployments}": nil,
		"{group: '', resource: events}":        nil,
	} {
		t.Run(entry, func(t *testing.T) {
			loaded, err := Decode([]byte(header + "ownerGC:\n  gcIgnoredResources:\n  - " + entry + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, loaded.Problems(Validate(loaded.Config)), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDirectoriesApart: stateDirectory, podLogsDirectory and
// containerLogsDirectory must not coincide or lie in one another: the
// container GC removes pod log directories under podLogsDirectory and
// links in containerLogsDirectory, so nodegc's state in either would go
// with them, and one log directory inside the other would be read as the
// other's. Before, each of these was valid.
func TestDirectoriesApart(t *testing.T) {
	for name, tc := range map[string]struct {
		state, pods, links string
		want               string
	}{
		"state under the pod logs":                 {state: "/var/log/pods/nodegc", want: `stateDirectory: Invalid value: "/var/log/pods/nodegc": lies in containerGC.podLogsDirectory (/var/log/pods)`},
		"state is the pod logs, written otherwise": {state: "/var/log/pods/", want: `containerGC.podLogsDirectory: Invalid value: "/var/log/pods": is stateDirectory (/var/log/pods/)`},
		"state escapes into the kubelet's":         {state: "/var/lib/nodegc/../kubelet", pods: "/var/lib/kubelet/pods-logs", want: `containerGC.podLogsDirectory: Invalid value: "/var/lib/kubelet/pods-logs": lies in stateDirectory (/var/lib/nodegc/../kubelet)`},
		"links are the pod logs":                   {links: "/var/log/pods", want: `containerGC.containerLogsDirectory: Invalid value: "/var/log/pods": is containerGC.podLogsDirectory (/var/log/pods)`},
		"apart":                                    {state: "/var/lib/nodegc", pods: "/var/log/pods", links: "/var/log/containers"},
		"siblings with a common prefix":            {state: "/var/log/pods-state"},
	} {
		t.Run(name, func(t *testing.T) {
			c := Defaulted()
			if tc.state != "" {
				c.StateDirectory = tc.state
			}
			if tc.pods != "" {
				c.ContainerGC.PodLogsDirectory = tc.pods
			}
			if tc.links != "" {
				c.ContainerGC.ContainerLogsDirectory = tc.links
			}
			var got []string
			for _, e := range Validate(c) {
				got = append(got, e.Error())
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, tc.want) }):
				t.Errorf("problems %q, want one beginning %q", got, tc.want)
			}
		})
	}
}

// TestValidateFillRateHorizonCeiling: the fill rate is measured over the
// last 5 seconds; projected over an hour, an ordinary pull of a few seconds
// on a half-empty disk asked to free down to the low threshold from a
// projected-empty disk (review r7 F3: 20% of a 100 GiB disk at 41% used).
// Before, any horizon was valid; now it is at most 5m.
func TestValidateFillRateHorizonCeiling(t *testing.T) {
	for horizon, want := range map[time.Duration][]string{
		0:                               nil,
		30 * time.Second:                nil,
		5 * time.Minute:                 nil,
		5*time.Minute + time.Nanosecond: {`imageGC.fillRateHorizon: Invalid value: "5m0.000000001s": must be at most 5m0s: the fill rate is measured over the last 5s, and a longer horizon turns an ordinary pull into a purge`},
		time.Hour:                       {`imageGC.fillRateHorizon: Invalid value: "1h0m0s": must be at most 5m0s: the fill rate is measured over the last 5s, and a longer horizon turns an ordinary pull into a purge`},
	} {
		c := Defaulted()
		c.ImageGC.FillRateHorizon = ptr.To(dur(horizon))
		var got []string
		for _, e := range Validate(c) {
			got = append(got, e.Error())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("fillRateHorizon %v (-want +got):\n%s", horizon, diff)
		}
	}
}
