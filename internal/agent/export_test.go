package agent

import (
	"context"
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nodegc/nodegc/pkg/cri"
)

// RegisteredFamilies returns the names of the metric families the agent
// registers, from the collectors' descriptors: a vector that has no child
// yet counts, though a scrape shows nothing of it. The parts register as
// newAgent wires them (status, node GC, owner GC where there is API access
// and it is enabled) and as the node GC does once the runtime answers (its
// container and image managers, made as `nodegc plan` makes them, with a
// pod informer that stops with ctx). opts.Config must be defaulted; its
// stateDirectory is read, not written.
func RegisteredFamilies(ctx context.Context, opts Options) (map[string]bool, error) {
	reg := &describingRegisterer{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := newStatus(reg)
	rc, err := restConfig(opts.Kubeconfig, opts.Config)
	if err != nil {
		return nil, err
	}
	n, err := newNodeGC(opts, rc, reg, nil, st)
	if err != nil {
		return nil, err
	}
	cfg := opts.Config
	c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: cfg.ContainerRuntimeEndpoint, ImageEndpoint: cfg.ImageServiceEndpoint,
		Timeout: cfg.RuntimeRequestTimeout.Duration})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, pods, err := n.containerManagerWithPods(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("container GC: %w", err)
	}
	if _, err := n.imageManager(ctx, c, true, pods); err != nil {
		return nil, fmt.Errorf("image GC: %w", err)
	}
	if rc != nil && *cfg.OwnerGC.EnableGarbageCollector {
		if _, err := newOwnerGC(opts, rc, reg, st); err != nil {
			return nil, err
		}
	}
	return reg.names, nil
}

// describingRegisterer notes the family name of every descriptor of what it
// registers.
type describingRegisterer struct {
	prometheus.Registerer
	names map[string]bool
}

// fqName is how prometheus.Desc.String shows a descriptor's name.
var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return r.Registerer.Register(c)
}

func (r *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
