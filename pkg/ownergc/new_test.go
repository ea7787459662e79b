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
		"zero QPS":          {func(c *config.OwnerGCConfiguration) { c.KubeAPIQPS = 0 }, "ownerGC.kubeAPIQPS"},
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

// TestNewClientRateLimit: the workers' deletes client and the monitors'
// client are limited to kubeAPIQPS, and a negative kubeAPIQPS leaves them
// without a client-side limit.
func TestNewClientRateLimit(t *testing.T) {
	rc := &rest.Config{Host: "https://127.0.0.1:1"}
	for name, tc := range map[string]struct {
		qps  float32
		want float32 // 0: no rate limiter
	}{
		"default":    {qps: config.DefaultOwnerGCQPS, want: config.DefaultOwnerGCQPS},
		"set":        {qps: 500, want: 500},
		"off (-1)":   {qps: -1},
		"off (-0.5)": {qps: -0.5},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := config.Defaulted().OwnerGC
			cfg.KubeAPIQPS = tc.qps
			c, err := New(Options{Config: cfg, RESTConfig: rc})
			if err != nil {
				t.Fatal(err)
			}
			for client, rl := range map[string]interface{ QPS() float32 }{
				"writes": c.writes.rest.GetRateLimiter(), "watches": c.watches.rest.GetRateLimiter(),
			} {
				switch {
				case tc.want == 0 && rl != nil:
					t.Errorf("%s client: rate limiter at %v QPS, want none", client, rl.QPS())
				case tc.want != 0 && rl == nil:
					t.Errorf("%s client: no rate limiter, want %v QPS", client, tc.want)
				case tc.want != 0 && rl.QPS() != tc.want:
					t.Errorf("%s client: rate limiter at %v QPS, want %v", client, rl.QPS(), tc.want)
				}
			}
		})
	}
}
