package images

import (
	"fmt"
	"time"

	"github.com/nodegc/nodegc/internal/imageref"
	"github.com/nodegc/nodegc/pkg/config"
)

// Policy is a validated image GC policy: the imageGC section it was made
// from, which its rules read, and what is compiled from it once.
type Policy struct {
	cfg     config.ImageGCConfiguration
	exclude *imageref.Set
	// layers memoizes layer numbering across plans (see layerMemo).
	layers layerMemo
}

// NewPolicy returns the policy of cfg, which must be defaulted
// (config.SetDefaults) and valid (config.ValidateImageGC): it checks
// nothing again. NewManager validates before it calls NewPolicy.
func NewPolicy(cfg config.ImageGCConfiguration) *Policy {
	return &Policy{cfg: cfg, exclude: compileExclusions(cfg.Exclude)}
}

func (p *Policy) highThresholdPercent() int { return int(*p.cfg.HighThresholdPercent) }
func (p *Policy) lowThresholdPercent() int  { return int(*p.cfg.LowThresholdPercent) }
func (p *Policy) minAge() time.Duration     { return p.cfg.MinimumGCAge.Duration }
func (p *Policy) maxAge() time.Duration     { return p.cfg.MaximumGCAge.Duration }

// fillRateHorizon is how far ahead the disk check projects the fill rate
// (0: it does not).
func (p *Policy) fillRateHorizon() time.Duration { return p.cfg.FillRateHorizon.Duration }

// compileExclusions compiles validated exclusion patterns. Config
// validation parses every pattern with imageref.Parse, and a parse error is
// the only way imageref.Compile fails, so an error here is a bug: it panics.
func compileExclusions(patterns []string) *imageref.Set {
	set, err := imageref.Compile(patterns)
	if err != nil {
		panic(fmt.Sprintf("image GC policy: exclusion %v (the configuration was not validated)", err))
	}
	return set
}

// thresholdGCEnabled is false when highThresholdPercent is 100, which turns
// disk-driven GC off as in kubelet.
func (p *Policy) thresholdGCEnabled() bool { return p.highThresholdPercent() < 100 }

// overHighThreshold reports whether disk usage calls for a GC now.
func (p *Policy) overHighThreshold(d DiskStats) bool {
	return p.thresholdGCEnabled() && d.Capacity > 0 && d.UsagePercent() >= p.highThresholdPercent()
}
