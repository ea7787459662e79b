package agent

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// RegisteredFamilies returns the names of the metric families the agent
// registers, from the collectors' descriptors: a vector that has no child
// yet counts, though a scrape shows nothing of it. See RegisteredMetrics.
func RegisteredFamilies(ctx context.Context, opts Options) (map[string]bool, error) {
	families, err := RegisteredMetrics(ctx, opts)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for name := range families {
		names[name] = true
	}
	return names, nil
}

// Family is a metric family the agent registers, as its collector
// describes it and as it is right after registration.
type Family struct {
	Name, Help string
	// Labels are the names of its variable labels, sorted.
	Labels []string
	// Type is nil where neither a series nor the collector tells it: a
	// family of a collector of its own (the owner GC's state) that has no
	// series before the owner GC runs.
	Type *dto.MetricType
	// Series are its series right after registration, before any run.
	Series []*dto.Metric
}

// RegisteredMetrics returns the metric families the agent registers, by
// name. The parts register as newAgent wires them (status, node GC, owner
// GC where there is API access and it is enabled) and as the node GC does
// once the runtime answers (its container and image managers, made by
// `nodegc plan`'s code, with a pod informer that stops with ctx).
// opts.Config must be defaulted; its stateDirectory is read, not written.
func RegisteredMetrics(ctx context.Context, opts Options) (map[string]*Family, error) {
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := newStatus(reg)
	if _, err := registerInfo(reg, opts.Config); err != nil {
		return nil, err
	}
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
	families := map[string]*Family{}
	for _, c := range reg.collectors {
		var typ *dto.MetricType
		switch c.(type) {
		case *prometheus.CounterVec:
			typ = dto.MetricType_COUNTER.Enum()
		case *prometheus.GaugeVec:
			typ = dto.MetricType_GAUGE.Enum()
		case *prometheus.HistogramVec:
			typ = dto.MetricType_HISTOGRAM.Enum()
		case *prometheus.SummaryVec:
			typ = dto.MetricType_SUMMARY.Enum()
		}
		ch := make(chan *prometheus.Desc)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			m := descFields.FindStringSubmatch(d.String())
			if m == nil {
				return nil, fmt.Errorf("descriptor %s: not read", d)
			}
			help, err := strconv.Unquote(m[2])
			if err != nil {
				return nil, fmt.Errorf("descriptor %s: %w", d, err)
			}
			var labels []string
			if m[3] != "" {
				labels = strings.Split(m[3], ",")
			}
			slices.Sort(labels)
			families[m[1]] = &Family{Name: m[1], Help: help, Labels: labels, Type: typ}
		}
	}
	gathered, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	for _, g := range gathered {
		f := families[g.GetName()]
		if f == nil {
			return nil, fmt.Errorf("%s gathered, not described", g.GetName())
		}
		f.Type, f.Series = g.Type, g.GetMetric()
	}
	return families, nil
}

// descFields reads a prometheus.Desc's String: its name, its quoted Help
// and its variable labels.
var descFields = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// recordingRegisterer registers in Registry and remembers what it
// registered, so that the type of a vector without a child yet is known.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
