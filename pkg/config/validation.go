package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"

	"github.com/nodegc/nodegc/internal/endpoint"
	"github.com/nodegc/nodegc/internal/imageref"
)

// MaxRuntimeRequestTimeout is the longest runtimeRequestTimeout accepted.
// The kubelet's validation sets none, but a timeout of every CRI call past
// a day is a mistake, and the deadlines made of it (the container GC's
// start grace, the stall watchdog's) must not reach the longest Duration.
const MaxRuntimeRequestTimeout = 24 * time.Hour

// MaxFillRateHorizon is the longest imageGC.fillRateHorizon accepted. The
// image GC measures the fill rate over the last 5 seconds (pkg/images,
// fillWindow) and, when that rate over the horizon reaches the eviction
// threshold, frees down to the low threshold as usage is projected to be
// then, at most from an empty disk: over an hour, a pull of a few seconds
// on a half-empty disk asks to free (100-low)% of it. 5m is 60 times the
// window, and the default imageGC.period (a full sweep comes that often
// anyway); nothing in the code founds a tighter bound.
const MaxFillRateHorizon = 5 * time.Minute

// Validate checks a defaulted configuration and returns every problem found,
// each with the path of the field it concerns. An empty list means valid.
// NodeNameProblems says why name cannot be a Node's name, nil when it can.
// A name with capitals that is valid lower-cased, as the kubelet registers
// its --hostname-override (and its host name), gets one message that says
// so and what to write, not the DNS rule.
func NodeNameProblems(name string) []string {
	msgs := validation.IsDNS1123Subdomain(name)
	if len(msgs) == 0 {
		return nil
	}
	if lower := strings.ToLower(name); lower != name && len(validation.IsDNS1123Subdomain(lower)) == 0 {
		return []string{fmt.Sprintf("no Node has capitals in its name: the kubelet registers its node name lower-cased "+
			"(--hostname-override=%s registers Node %s): write %q", name, lower, lower)}
	}
	return msgs
}

func Validate(c *NodeGCConfiguration) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	if c.NodeName != "" {
		for _, msg := range NodeNameProblems(c.NodeName) {
			errs = append(errs, field.Invalid(field.NewPath("nodeName"), c.NodeName, msg))
		}
	}
	errs = append(errs, validateAbsolutePath(field.NewPath("stateDirectory"), c.StateDirectory)...)
	errs = append(errs, validateEndpoint(field.NewPath("containerRuntimeEndpoint"), c.ContainerRuntimeEndpoint, false)...)
	errs = append(errs, validateEndpoint(field.NewPath("imageServiceEndpoint"), c.ImageServiceEndpoint, true)...)
	errs = append(errs, validatePositive(field.NewPath("runtimeRequestTimeout"), c.RuntimeRequestTimeout)...)
	if d := c.RuntimeRequestTimeout.Duration; d > MaxRuntimeRequestTimeout {
		errs = append(errs, field.Invalid(field.NewPath("runtimeRequestTimeout"), d.String(), "must be at most "+MaxRuntimeRequestTimeout.String()))
	}
	errs = append(errs, validateBindAddress(field.NewPath("metricsBindAddress"), c.MetricsBindAddress)...)
	errs = append(errs, validateBindAddress(field.NewPath("healthzBindAddress"), c.HealthzBindAddress)...)
	if bindConflict(c.MetricsBindAddress, c.HealthzBindAddress) {
		errs = append(errs, field.Invalid(field.NewPath("healthzBindAddress"), c.HealthzBindAddress,
			fmt.Sprintf("listens on the port of metricsBindAddress (%q) on an overlapping address: write both the same to serve /metrics, /healthz and /readyz on one listener, or use another port", c.MetricsBindAddress)))
	}
	errs = append(errs, validateClientConnection(field.NewPath("clientConnection"), &c.ClientConnection)...)
	errs = append(errs, ValidateImageGC(&c.ImageGC)...)
	errs = append(errs, ValidateContainerGC(&c.ContainerGC)...)
	errs = append(errs, ValidateOwnerGC(&c.OwnerGC)...)
	errs = append(errs, validateFloors(c)...)
	errs = append(errs, validateLeaderElection(field.NewPath("leaderElection"), &c.LeaderElection)...)
	errs = append(errs, validateDirectoriesApart(c)...)
	return errs
}

// validateDirectoriesApart refuses stateDirectory, podLogsDirectory and
// containerLogsDirectory that coincide or lie in one another (compared
// cleaned: /var/lib/nodegc/../kubelet is /var/lib/kubelet): the container
// GC removes pod log directories under podLogsDirectory and links in
// containerLogsDirectory, so nodegc's state in either would go with them,
// and one log directory in the other would be read as the other's.
func validateDirectoriesApart(c *NodeGCConfiguration) field.ErrorList {
	dirs := []struct {
		p   *field.Path
		dir string
	}{
		{field.NewPath("stateDirectory"), c.StateDirectory},
		{field.NewPath("containerGC", "podLogsDirectory"), c.ContainerGC.PodLogsDirectory},
		{field.NewPath("containerGC", "containerLogsDirectory"), c.ContainerGC.ContainerLogsDirectory},
	}
	var errs field.ErrorList
	for i, a := range dirs {
		for j, b := range dirs {
			if i == j || !filepath.IsAbs(a.dir) || !filepath.IsAbs(b.dir) {
				continue
			}
			rel, err := filepath.Rel(filepath.Clean(b.dir), filepath.Clean(a.dir))
			switch {
			case err != nil || rel == ".." || strings.HasPrefix(rel, "../"):
			case rel == "." && i > j: // said once, at the later field
				errs = append(errs, field.Invalid(a.p, a.dir, fmt.Sprintf("is %s (%s): give each its own directory", b.p, b.dir)))
			case rel != ".":
				errs = append(errs, field.Invalid(a.p, a.dir, fmt.Sprintf("lies in %s (%s): give each its own directory, apart", b.p, b.dir)))
			}
		}
	}
	return errs
}

// ValidateImageGC checks a defaulted imageGC section on its own, as Validate
// does, with paths under imageGC. The image GC's constructors call it, so a
// program that embeds a collector gets the agent's rules and messages.
func ValidateImageGC(c *ImageGCConfiguration) field.ErrorList {
	return validateImageGC(field.NewPath("imageGC"), c)
}

// ValidateContainerGC checks a defaulted containerGC section on its own, as
// Validate does, with paths under containerGC.
func ValidateContainerGC(c *ContainerGCConfiguration) field.ErrorList {
	return validateContainerGC(field.NewPath("containerGC"), c)
}

// ValidateOwnerGC checks a defaulted ownerGC section on its own, as Validate
// does, with paths under ownerGC.
func ValidateOwnerGC(c *OwnerGCConfiguration) field.ErrorList {
	return validateOwnerGC(field.NewPath("ownerGC"), c)
}

func validateImageGC(p *field.Path, c *ImageGCConfiguration) field.ErrorList {
	var errs field.ErrorList
	high, low := c.HighThresholdPercent, c.LowThresholdPercent
	errs = append(errs, validatePercent(p.Child("highThresholdPercent"), high)...)
	errs = append(errs, validatePercent(p.Child("lowThresholdPercent"), low)...)
	if high != nil && low != nil && *low >= *high {
		errs = append(errs, field.Invalid(p.Child("lowThresholdPercent"), *low,
			fmt.Sprintf("must be less than highThresholdPercent (%d)", *high)))
	}
	errs = append(errs, validateNonNegative(p.Child("minimumGCAge"), c.MinimumGCAge)...)
	errs = append(errs, validateNonNegative(p.Child("maximumGCAge"), c.MaximumGCAge)...)
	if c.MinimumGCAge != nil && c.MaximumGCAge != nil && c.MaximumGCAge.Duration > 0 &&
		c.MaximumGCAge.Duration <= c.MinimumGCAge.Duration {
		errs = append(errs, field.Invalid(p.Child("maximumGCAge"), c.MaximumGCAge.Duration.String(),
			fmt.Sprintf("must be greater than minimumGCAge (%s), or 0 to disable", c.MinimumGCAge.Duration)))
	}
	errs = append(errs, validatePositive(p.Child("period"), c.Period)...)
	errs = append(errs, validatePositive(p.Child("diskCheckInterval"), c.DiskCheckInterval)...)
	errs = append(errs, validateNonNegative(p.Child("fillRateHorizon"), c.FillRateHorizon)...)
	if h := c.FillRateHorizon; h != nil && h.Duration > MaxFillRateHorizon {
		errs = append(errs, field.Invalid(p.Child("fillRateHorizon"), h.Duration.String(), "must be at most "+MaxFillRateHorizon.String()+
			": the fill rate is measured over the last 5s, and a longer horizon turns an ordinary pull into a purge"))
	}
	for _, m := range []struct {
		name       string
		thresholds map[string]string
	}{{"evictionHard", c.EvictionHard}, {"evictionSoft", c.EvictionSoft}} {
		for _, s := range diskSignals {
			if v, ok := m.thresholds[s]; ok {
				if _, err := ParseEvictionThreshold(v); err != nil {
					errs = append(errs, field.Invalid(p.Child(m.name).Key(s), v, err.Error()))
				}
			}
		}
		for _, s := range slices.Sorted(maps.Keys(m.thresholds)) {
			if !slices.Contains(kubeletSignals, s) {
				errs = append(errs, field.NotSupported(p.Child(m.name).Key(s), s, kubeletSignals))
			}
		}
	}
	for i, pattern := range c.Exclude {
		ip := p.Child("exclude").Index(i)
		if strings.TrimSpace(pattern) == "" {
			errs = append(errs, field.Invalid(ip, pattern, "must not be empty"))
			continue
		}
		parsed, err := imageref.Parse(pattern)
		if err != nil {
			errs = append(errs, field.Invalid(ip, pattern, "must be a valid image reference pattern: "+err.Error()))
			continue
		}
		// A pattern no reference can match, or read as another image
		// than it names, protects nothing the operator meant: refused, not
		// a warning at start that a DaemonSet's log soon buries.
		if why := parsed.NeverMatches(); why != "" {
			errs = append(errs, field.Invalid(ip, pattern, "can never match an image reference: "+why))
		} else if why := parsed.Misread(); why != "" {
			errs = append(errs, field.Invalid(ip, pattern, why))
		}
	}
	if c.KeepNewestPerRepository < 0 {
		errs = append(errs, field.Invalid(p.Child("keepNewestPerRepository"), c.KeepNewestPerRepository,
			"must be greater than or equal to 0 (0 disables it)"))
	}
	return errs
}

// excludeWarnings returns a warning for every image GC exclusion pattern
// that is read other than as written (white space around it, "**" inside
// a component), naming the field path and, when l locates it, its line.
// Patterns that are invalid, or that Validate refuses (NeverMatches,
// Misread), are left to Validate.
func excludeWarnings(c *ImageGCConfiguration, l *Loaded) []string {
	var out []string
	for i, pattern := range c.Exclude {
		p, err := imageref.Parse(pattern)
		if err != nil || p.NeverMatches() != "" || p.Misread() != "" {
			continue
		}
		path := field.NewPath("imageGC", "exclude").Index(i).String()
		for _, w := range p.Warnings() {
			out = append(out, l.locate(path, path, fmt.Sprintf("%s: %q %s", path, pattern, w)))
		}
	}
	return out
}

func validateContainerGC(p *field.Path, c *ContainerGCConfiguration) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateNonNegative(p.Child("minAge"), c.MinAge)...)
	errs = append(errs, validateNonNegative(p.Child("maxAge"), c.MaxAge)...)
	if c.MinAge != nil && c.MaxAge != nil && c.MaxAge.Duration > 0 && c.MaxAge.Duration <= c.MinAge.Duration {
		errs = append(errs, field.Invalid(p.Child("maxAge"), c.MaxAge.Duration.String(),
			fmt.Sprintf("must be greater than minAge (%s), or 0 to disable", c.MinAge.Duration)))
	}
	switch c.MinAgeFrom {
	case AgeFromCreation, AgeFromExit:
	default:
		errs = append(errs, field.NotSupported(p.Child("minAgeFrom"), c.MinAgeFrom,
			[]ContainerAgeReference{AgeFromCreation, AgeFromExit}))
	}
	if c.MaxPerPodContainer == nil {
		errs = append(errs, field.Required(p.Child("maxPerPodContainer"), ""))
	} else if *c.MaxPerPodContainer == 0 {
		errs = append(errs, field.Invalid(p.Child("maxPerPodContainer"), 0,
			"must be at least 1, or negative for no limit: nodegc always keeps the newest dead container of a live pod's container (kubectl logs --previous needs it)"))
	}
	if c.MaxContainers == nil {
		errs = append(errs, field.Required(p.Child("maxContainers"), ""))
	}
	errs = append(errs, validatePositive(p.Child("period"), c.Period)...)
	errs = append(errs, validateAbsolutePath(p.Child("podLogsDirectory"), c.PodLogsDirectory)...)
	errs = append(errs, validateAbsolutePath(p.Child("containerLogsDirectory"), c.ContainerLogsDirectory)...)
	return errs
}

func validateOwnerGC(p *field.Path, c *OwnerGCConfiguration) field.ErrorList {
	var errs field.ErrorList
	if c.EnableGarbageCollector == nil {
		errs = append(errs, field.Required(p.Child("enableGarbageCollector"), ""))
	}
	if c.ConcurrentGCSyncs <= 0 {
		errs = append(errs, field.Invalid(p.Child("concurrentGCSyncs"), c.ConcurrentGCSyncs, "must be greater than 0"))
	}
	seen := map[GroupResource]bool{}
	for i, gr := range c.GCIgnoredResources {
		ip := p.Child("gcIgnoredResources").Index(i)
		if gr.Resource == "" {
			errs = append(errs, field.Required(ip.Child("resource"), "a plural resource name such as events"))
		}
		errs = append(errs, validateIgnoredResource(ip, gr)...)
		if seen[gr] {
			errs = append(errs, field.Duplicate(ip, gr))
		}
		seen[gr] = true
	}
	switch q := float64(c.KubeAPIQPS); {
	case math.IsNaN(q) || math.IsInf(q, 0):
		errs = append(errs, field.Invalid(p.Child("kubeAPIQPS"), c.KubeAPIQPS, "must be a finite number"))
	case q == 0:
		errs = append(errs, field.Invalid(p.Child("kubeAPIQPS"), c.KubeAPIQPS, "must be greater than 0, or negative to turn the client-side rate limit off"))
	}
	if c.KubeAPIBurst <= 0 {
		errs = append(errs, field.Invalid(p.Child("kubeAPIBurst"), c.KubeAPIBurst, "must be greater than 0"))
	}
	errs = append(errs, validatePositive(p.Child("discoveryResyncPeriod"), c.DiscoveryResyncPeriod)...)
	errs = append(errs, validateNonNegative(p.Child("unsyncedResourceHold"), c.UnsyncedResourceHold)...)
	errs = append(errs, validateNonNegative(p.Child("stuckDeletionThreshold"), c.StuckDeletionThreshold)...)
	return errs
}

// validateIgnoredResource refuses a gcIgnoredResources entry written as
// operators write a resource elsewhere, which discovery never serves: it
// would match nothing, and the owner GC would watch and collect the
// resource it was meant to leave alone. The core group written "core" or
// "v1" (kubectl's names), a group/version, a Kind, a
// CustomResourceDefinition's full name, a subresource (pods/status); a
// group that is no lower-case DNS subdomain, a resource that is no DNS
// label (capitals, white space, a wildcard: entries are compared exactly,
// pkg/ownergc). A singular resource name
// (deployment) cannot be told from a plural without discovery: it passes.
func validateIgnoredResource(p *field.Path, gr GroupResource) field.ErrorList {
	const wildcard = "no wildcards: an entry names one group and one resource; list each as its own entry"
	var errs field.ErrorList
	switch group, _, versioned := strings.Cut(gr.Group, "/"); {
	case gr.Group == "":
	case gr.Group == "core" || gr.Group == "v1":
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group,
			`the core group is "" here, as discovery names it: write group: ""`))
	case versioned:
		if group == "core" {
			group = ""
		}
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group,
			fmt.Sprintf("a group/version: write the group alone, group: %q (an entry holds every version of its resource)", group)))
	case strings.Contains(gr.Group, "*"):
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group, wildcard))
	case len(validation.IsDNS1123Subdomain(gr.Group)) == 0:
	case strings.TrimSpace(gr.Group) != gr.Group && len(validation.IsDNS1123Subdomain(strings.TrimSpace(gr.Group))) == 0:
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group,
			fmt.Sprintf("has white space around it, which no API group holds: write group: %q", strings.TrimSpace(gr.Group))))
	case len(validation.IsDNS1123Subdomain(strings.ToLower(gr.Group))) == 0:
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group,
			fmt.Sprintf("an API group is lower case, as discovery names it: write group: %q", strings.ToLower(gr.Group))))
	default:
		errs = append(errs, field.Invalid(p.Child("group"), gr.Group,
			"an API group is a DNS subdomain, as discovery names it: "+strings.Join(validation.IsDNS1123Subdomain(gr.Group), "; ")))
	}
	switch trimmed := strings.TrimSpace(gr.Resource); {
	case gr.Resource == "" || resourceNameRegexp.MatchString(gr.Resource):
	case strings.ToLower(gr.Resource) != gr.Resource:
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource,
			"a Kind, not a resource: write the plural, lower-case resource name as `kubectl api-resources` shows it (configmaps for ConfigMap)"))
	case strings.Contains(gr.Resource, "."):
		plural, group, _ := strings.Cut(gr.Resource, ".")
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource,
			fmt.Sprintf("a CustomResourceDefinition's full name: give its group in group and its plural in resource: {group: %s, resource: %s}", group, plural)))
	case strings.Contains(gr.Resource, "/"):
		resource, _, _ := strings.Cut(gr.Resource, "/")
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource,
			fmt.Sprintf("a subresource: the owner GC watches resources, and an entry holds its subresources: write resource: %q", resource)))
	case strings.Contains(gr.Resource, "*"):
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource, wildcard))
	case trimmed != gr.Resource && resourceNameRegexp.MatchString(trimmed):
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource,
			fmt.Sprintf("has white space around it, which no resource name holds: write resource: %q", trimmed)))
	default:
		errs = append(errs, field.Invalid(p.Child("resource"), gr.Resource,
			"a resource name is lower-case letters, digits and \"-\", starting and ending with a letter or digit, as `kubectl api-resources` shows it"))
	}
	return errs
}

// resourceNameRegexp matches a resource's name as discovery serves it: a
// DNS label (the plural of a CustomResourceDefinition is one, and so is
// every built-in resource's).
var resourceNameRegexp = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func validateClientConnection(p *field.Path, c *componentbaseconfigv1alpha1.ClientConnectionConfiguration) field.ErrorList {
	var errs field.ErrorList
	if c.QPS <= 0 {
		errs = append(errs, field.Invalid(p.Child("qps"), c.QPS, "must be greater than 0"))
	}
	if c.Burst <= 0 {
		errs = append(errs, field.Invalid(p.Child("burst"), c.Burst, "must be greater than 0"))
	}
	// A relative path would be read from the working directory of the
	// process, not from the configuration file's: `config validate`
	// would accept what `run` started elsewhere cannot find.
	if c.Kubeconfig != "" && !filepath.IsAbs(c.Kubeconfig) {
		errs = append(errs, field.Invalid(p.Child("kubeconfig"), c.Kubeconfig,
			"must be an absolute path (a relative one is read from the working directory of nodegc, not from the configuration file's)"))
	}
	return errs
}

// leaderElectionJitter is client-go's leaderelection.JitterFactor.
const leaderElectionJitter = 1.2

func validateLeaderElection(p *field.Path, c *componentbaseconfigv1alpha1.LeaderElectionConfiguration) field.ErrorList {
	var errs field.ErrorList
	if c.LeaderElect == nil {
		return append(errs, field.Required(p.Child("leaderElect"), ""))
	}
	if !*c.LeaderElect {
		return errs
	}
	errs = append(errs, validatePositive(p.Child("leaseDuration"), c.LeaseDuration)...)
	errs = append(errs, validatePositive(p.Child("renewDeadline"), c.RenewDeadline)...)
	errs = append(errs, validatePositive(p.Child("retryPeriod"), c.RetryPeriod)...)
	// The Lease holds leaseDurationSeconds: the other instances wait whole
	// seconds, and the leader must stop writing (at renewDeadline) before.
	if c.LeaseDuration.Duration.Truncate(time.Second) <= c.RenewDeadline.Duration {
		errs = append(errs, field.Invalid(p.Child("leaseDuration"), c.LeaseDuration.Duration.String(),
			fmt.Sprintf("must be greater than renewDeadline (%s), in whole seconds (the Lease holds leaseDurationSeconds)", c.RenewDeadline.Duration)))
	}
	// client-go's leader election retries renewals every retryPeriod with up
	// to leaderElectionJitter x retryPeriod between them. Compared as
	// floats: the product of a retry period near time.Duration's range
	// overflows a Duration (and wrapped, it passed).
	if float64(c.RenewDeadline.Duration) <= leaderElectionJitter*float64(c.RetryPeriod.Duration) {
		errs = append(errs, field.Invalid(p.Child("renewDeadline"), c.RenewDeadline.Duration.String(),
			fmt.Sprintf("must be greater than %g x retryPeriod (%s)", leaderElectionJitter, c.RetryPeriod.Duration)))
	}
	if c.ResourceLock != DefaultResourceLock {
		errs = append(errs, field.NotSupported(p.Child("resourceLock"), c.ResourceLock, []string{DefaultResourceLock}))
	}
	for _, msg := range validation.IsDNS1123Subdomain(c.ResourceName) {
		errs = append(errs, field.Invalid(p.Child("resourceName"), c.ResourceName, msg))
	}
	for _, msg := range validation.IsDNS1123Label(c.ResourceNamespace) {
		errs = append(errs, field.Invalid(p.Child("resourceNamespace"), c.ResourceNamespace, msg))
	}
	return errs
}

func validatePercent(p *field.Path, v *int32) field.ErrorList {
	if v == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	if *v < 0 || *v > 100 {
		return field.ErrorList{field.Invalid(p, *v, "must be between 0 and 100, inclusive")}
	}
	return nil
}

// validateFloors refuses, in a configuration an operator writes, an
// interval or a timeout above 0 but so short that a loop would spin on a
// core, or every runtime call time out. (Values at or under 0 are refused
// by the collectors' own validation, which tests and embedders call with
// shorter intervals than a node wants.)
func validateFloors(c *NodeGCConfiguration) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		path  *field.Path
		d     metav1.Duration
		floor time.Duration
	}{
		{field.NewPath("runtimeRequestTimeout"), c.RuntimeRequestTimeout, time.Second},
		{field.NewPath("imageGC", "period"), c.ImageGC.Period, time.Second},
		{field.NewPath("imageGC", "diskCheckInterval"), c.ImageGC.DiskCheckInterval, 100 * time.Millisecond},
		{field.NewPath("containerGC", "period"), c.ContainerGC.Period, time.Second},
		{field.NewPath("ownerGC", "discoveryResyncPeriod"), c.OwnerGC.DiscoveryResyncPeriod, time.Second},
	} {
		if f.d.Duration > 0 && f.d.Duration < f.floor {
			errs = append(errs, field.Invalid(f.path, f.d.Duration.String(), "must be at least "+f.floor.String()))
		}
	}
	return errs
}

func validatePositive(p *field.Path, d metav1.Duration) field.ErrorList {
	if d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be greater than 0")}
	}
	return nil
}

func validateNonNegative(p *field.Path, d *metav1.Duration) field.ErrorList {
	if d == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	if d.Duration < 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be greater than or equal to 0")}
	}
	return nil
}

func validateAbsolutePath(p *field.Path, dir string) field.ErrorList {
	if dir == "" {
		return field.ErrorList{field.Required(p, "an absolute path")}
	}
	if !filepath.IsAbs(dir) {
		return field.ErrorList{field.Invalid(p, dir, "must be an absolute path")}
	}
	return nil
}

// validateEndpoint accepts a unix socket endpoint as the kubelet reads it
// (endpoint.SocketPath): unix:///absolute/path, the only transport CRI
// runtimes serve on Linux, and the forms the kubelet also accepts.
func validateEndpoint(p *field.Path, ep string, optional bool) field.ErrorList {
	if ep == "" {
		if optional {
			return nil
		}
		return field.ErrorList{field.Required(p, "a unix:// endpoint such as "+DefaultContainerRuntimeEndpoint)}
	}
	if _, err := endpoint.SocketPath(ep); err != nil {
		return field.ErrorList{field.Invalid(p, ep, err.Error())}
	}
	return nil
}

// bindConflict says whether two valid bind addresses, written differently,
// cannot both be listened on: the same port (not 0: any free one) on
// addresses that overlap (either is a wildcard, or both name one host).
// Written the same, the agent serves both on one listener.
func bindConflict(a, b string) bool {
	if a == b || a == "0" || b == "0" {
		return false
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	if wildcard(ha) || wildcard(hb) {
		return true
	}
	host := func(h string) string {
		if h == "localhost" {
			return "127.0.0.1"
		}
		return net.ParseIP(h).String()
	}
	return host(ha) == host(hb)
}

// validateBindAddress accepts "host:port", ":port" or "0" (disabled).
func validateBindAddress(p *field.Path, addr string) field.ErrorList {
	if addr == "0" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(p, addr, `must be "host:port", ":port", or "0" to disable`)}
	}
	if host != "" && host != "localhost" && net.ParseIP(host) == nil {
		return field.ErrorList{field.Invalid(p, addr, "host must be an IP address, localhost or empty")}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return field.ErrorList{field.Invalid(p, addr, "port must be a number between 0 and 65535")}
	}
	return nil
}
