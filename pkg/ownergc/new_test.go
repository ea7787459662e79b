package ownergc

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/pkg/config"
)

// TestNewRejectsWhatValidationRejects: New applies the configuration's own
// rules (config.ValidateOwnerGC) and names the field, rather than quietly
// defaulting what it was given: a zero section, as a program embedding the
// collector might pass, is refused, not run with guesses.
func TestNewRejectsWhatValidationRejects(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		mutate func(*config.OwnerGCConfiguration)
		field  string
	}{
		"zero section":      {func(c *config.OwnerGCConfiguration) { *c = config.OwnerGCConfiguration{} }, "ownerGC.concurrentGCSyncs"},
		"no workers":        {func(c *config.OwnerGCConfiguration) { c.ConcurrentGCSyncs = 0 }, "ownerGC.concurrentGCSyncs"},
		"negative QPS":      {func(c *config.OwnerGCConfiguration) { c.KubeAPIQPS = -1 }, "ownerGC.kubeAPIQPS"},
		"no resync period":  {func(c *config.OwnerGCConfiguration) { c.DiscoveryResyncPeriod.Duration = 0 }, "ownerGC.discoveryResyncPeriod"},
		"unnamed ignorance": {func(c *config.OwnerGCConfiguration) { c.GCIgnoredResources = []config.GroupResource{{Group: "x"}} }, "ownerGC.gcIgnoredResources[0].resource"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Defaulted().OwnerGC
			tc.mutate(&cfg)
			_, err := New(Options{Config: cfg, RESTConfig: rc})
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New = %v, want an error naming %s", err, tc.field)
			}
		})
	}
	if _, err := New(Options{Config: config.Defaulted().OwnerGC, RESTConfig: rc}); err != nil {
		t.Errorf("New with the defaults = %v", err)
	}
}
