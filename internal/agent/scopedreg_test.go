package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestScopedRegisterer: what was registered through a scope is taken out
// with it, and the same metric can then be registered again; what was
// registered directly stays.
func TestScopedRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	kept := prometheus.NewCounter(prometheus.CounterOpts{Name: "kept_total", Help: "h"})
	reg.MustRegister(kept)
	for round := range 2 {
		s := newScopedRegisterer(reg)
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: "scoped_total", Help: "h"})
		s.MustRegister(c) // panics in the second round if the first one's stayed
		c.Add(float64(round + 1))
		if n, err := testutil.GatherAndCount(reg); err != nil || n != 2 {
			t.Fatalf("round %d: %d series (%v), want 2", round, n, err)
		}
		s.unregisterAll()
		if n, err := testutil.GatherAndCount(reg); err != nil || n != 1 {
			t.Fatalf("round %d after unregisterAll: %d series (%v), want 1 (kept_total)", round, n, err)
		}
	}
}
