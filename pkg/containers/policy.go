package containers

import (
	"time"

	"github.com/nodegc/nodegc/pkg/config"
)

// Policy is a container GC policy, made of a validated configuration.
type Policy struct {
	minAge             time.Duration
	maxAge             time.Duration
	fromExit           bool
	maxPerPodContainer int // negative: no limit
	maxContainers      int // negative: no limit
}

// NewPolicy returns the policy cfg describes. cfg must be defaulted
// (config.SetDefaults) and valid (config.ValidateContainerGC, which
// NewManager and the agent's config.Validate run): NewPolicy checks and
// defaults nothing again.
func NewPolicy(cfg config.ContainerGCConfiguration) *Policy {
	return &Policy{
		minAge:             cfg.MinAge.Duration,
		maxAge:             cfg.MaxAge.Duration,
		fromExit:           cfg.MinAgeFrom == config.AgeFromExit,
		maxPerPodContainer: int(*cfg.MaxPerPodContainer),
		maxContainers:      int(*cfg.MaxContainers),
	}
}

// agesFromExit says whether ages count from the containers' exit, which
// then must be read (Container.FinishedAt).
func (p *Policy) agesFromExit() bool { return p.fromExit }
