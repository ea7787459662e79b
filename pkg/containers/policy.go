package containers

import (
	"time"

	"github.com/nodegc/nodegc/pkg/config"
)

// Policy is a container GC policy, made of a validated configuration.
type Policy struct {
	minAge             time.Duration
	startGrace         time.Duration // a created, never started instance may be starting for this long
	maxAge             time.Duration
	fromExit           bool
	maxPerPodContainer int // negative: no limit
	maxContainers      int // negative: no limit
}

// NewPolicy returns the policy cfg describes. cfg must be defaulted
// (config.SetDefaults) and valid (config.ValidateContainerGC, which
// NewManager and the agent's config.Validate run): NewPolicy checks and
// defaults nothing again. runtimeRequestTimeout is the kubelet's (the
// agent's runtimeRequestTimeout mirrors it): the deadline of the kubelet's
// StartContainer, which sets how long a created container may still be
// starting (StartGrace).
func NewPolicy(cfg config.ContainerGCConfiguration, runtimeRequestTimeout time.Duration) *Policy {
	return &Policy{
		minAge:             cfg.MinAge.Duration,
		startGrace:         StartGrace(runtimeRequestTimeout),
		maxAge:             cfg.MaxAge.Duration,
		fromExit:           cfg.MinAgeFrom == config.AgeFromExit,
		maxPerPodContainer: int(*cfg.MaxPerPodContainer),
		maxContainers:      int(*cfg.MaxContainers),
	}
}

// agesFromExit says whether ages count from the containers' exit, which
// then must be read (Container.FinishedAt).
func (p *Policy) agesFromExit() bool { return p.fromExit }
