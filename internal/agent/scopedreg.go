package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// scopedRegisterer registers collectors in reg and remembers them, so that
// unregisterAll can take them out again: the node GC's managers register
// their metrics through one, and the managers built after them, for
// another runtime, register the same metrics anew (their counters then
// start again at 0, which Prometheus reads as a reset).
type scopedRegisterer struct {
	reg prometheus.Registerer

	mu         sync.Mutex
	registered []prometheus.Collector
}

func newScopedRegisterer(reg prometheus.Registerer) *scopedRegisterer {
	return &scopedRegisterer{reg: reg}
}

func (s *scopedRegisterer) Register(c prometheus.Collector) error {
	if err := s.reg.Register(c); err != nil {
		return err
	}
	s.mu.Lock()
	s.registered = append(s.registered, c)
	s.mu.Unlock()
	return nil
}

func (s *scopedRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

func (s *scopedRegisterer) Unregister(c prometheus.Collector) bool {
	return s.reg.Unregister(c)
}

// unregisterAll takes out every collector registered through s.
func (s *scopedRegisterer) unregisterAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.registered {
		s.reg.Unregister(c)
	}
	s.registered = nil
}
