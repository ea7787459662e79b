package agent

import (
	"context"
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// RegisteredFamilies returns the names of the metric families the agent
// registers, from the collectors' descriptors: a vector that has no child
// yet counts, though a scrape shows nothing of it. The parts register as
// newAgent wires them (status, node GC, owner GC where there is API access
// and it is enabled) and as the node GC does once the runtime answers (its
// container and image managers, made by `nodegc plan`'s code, with a pod
// informer that stops with ctx). opts.Config must be defaulted; its
// stateDirectory is read, not written.
func RegisteredFamilies(ctx context.Context, opts Options) (map[string]bool, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := newStatus(reg)
	r, err := plan(ctx, opts, reg, st)
	if err != nil {
		return nil, err
	}
	if r.ImagesErr != nil || r.ContainersErr != nil {
		return nil, fmt.Errorf("image GC: %v; container GC: %v", r.ImagesErr, r.ContainersErr)
	}
	rc, _, err := restConfig(opts.Kubeconfig, opts.Config)
	if err != nil {
		return nil, err
	}
	if rc != nil && *opts.Config.OwnerGC.EnableGarbageCollector {
		if _, err := newOwnerGC(opts, rc, reg, st); err != nil {
			return nil, err
		}
	}
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names, nil
}

// fqName is how prometheus.Desc.String shows a descriptor's name.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)
