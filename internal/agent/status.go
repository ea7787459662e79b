package agent

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// status is what /healthz, /readyz and the leader metric report. Each part
// sets its own piece; one lock guards it whole. The watchdog, set at
// creation, has its own locks.
type status struct {
	watchdog *watchdog

	mu sync.Mutex
	// runtime answers CRI Version; nil while node GC is off.
	runtime func(context.Context) error
	// leading, ownerSynced and ownerStalled: this instance holds the
	// lease, its owner GC has synced its informers, and why it makes no
	// progress while work waits (nil: it does).
	leading      bool
	ownerSynced  func() bool
	ownerStalled func() error

	leader prometheus.Gauge
}

func newStatus(reg prometheus.Registerer) *status { return newStatusWithClock(reg, clock.RealClock{}) }

func newStatusWithClock(reg prometheus.Registerer, clk clock.PassiveClock) *status {
	s := &status{watchdog: newWatchdog(clk), leader: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nodegc_owner_gc_leader",
		Help: "1 while this instance holds the owner GC lease and runs the owner GC, else 0.",
	})}
	reg.MustRegister(s.leader)
	return s
}

func (s *status) setRuntimeCheck(check func(context.Context) error) {
	s.mu.Lock()
	s.runtime = check
	s.mu.Unlock()
}

func (s *status) setLeading(leading bool, synced func() bool, stalled func() error) {
	s.mu.Lock()
	s.leading, s.ownerSynced, s.ownerStalled = leading, synced, stalled
	s.mu.Unlock()
	v := 0.0
	if leading {
		v = 1
	}
	s.leader.Set(v)
}

// healthy says whether the agent should go on running: no GC loop is
// wedged (see watchdog), and the owner GC, where this instance leads, is
// not stalled (ownergc.Collector.Stalled). It answers from memory, at once.
func (s *status) healthy() error {
	s.mu.Lock()
	leading, stalled := s.leading, s.ownerStalled
	s.mu.Unlock()
	err := s.watchdog.wedged()
	if leading && stalled != nil {
		err = errors.Join(err, stalled())
	}
	return err
}

// ready says whether the agent can do its work: the runtime answers (when
// node GC runs), no GC loop is wedged and, in the leader, the owner GC's
// informers have synced.
func (s *status) ready(ctx context.Context) error {
	s.mu.Lock()
	runtime, leading, synced := s.runtime, s.leading, s.ownerSynced
	s.mu.Unlock()
	var errs []error
	if runtime != nil {
		if err := runtime(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.watchdog.notReady(); err != nil {
		errs = append(errs, err)
	}
	if leading && synced != nil && !synced() {
		errs = append(errs, errors.New("owner GC: informers not synced yet"))
	}
	return errors.Join(errs...)
}
