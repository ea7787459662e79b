package main

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
)

// recordEvery is how often the recorder reads the image filesystem and
// nodegc's /metrics.
const recordEvery = 250 * time.Millisecond

// usagePoint is one reading of the image filesystem.
type usagePoint struct {
	at      time.Duration // since the recording began
	percent float64       // 100 - available*100/capacity, unrounded
}

// runMark is one GC run nodegc reported: an increase of
// nodegc_image_gc_runs_total or nodegc_container_gc_runs_total between two
// scrapes. It ends at the scrape that saw it and began its duration (the
// increase of the run duration histogram's sum) earlier.
type runMark struct {
	start, end time.Duration
	collector  string // "image" or "container"
	trigger    string
	result     string
}

// eventMark is a moment of the demo's story (nodegc started, a Deployment
// deleted, ...).
type eventMark struct {
	at    time.Duration
	label string
}

// usageTrace is what the plot shows.
type usageTrace struct {
	title     string
	high, low int
	points    []usagePoint
	runs      []runMark
	events    []eventMark
}

// usageRecorder samples the image filesystem's usage and nodegc's GC run
// counters in the background for the usage plot.
type usageRecorder struct {
	began  time.Time
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu     sync.Mutex
	trace  usageTrace
	scrape func(context.Context) ([]*dto.MetricFamily, error) // nil until nodegc runs
	last   *runCounters                                       // at the last scrape; nil before the first
}

// runCounters are nodegc's GC run counters at one scrape.
type runCounters struct {
	runs     map[runKey]float64 // nodegc_<collector>_gc_runs_total
	duration map[runKey]float64 // nodegc_<collector>_gc_run_duration_seconds_sum, result ""
}

type runKey struct{ collector, trigger, result string }

// startUsageRecorder starts reading n's image filesystem, and nodegc's
// /metrics once watchRuns gives it, every recordEvery until stop.
func startUsageRecorder(ctx context.Context, n *node.Node, title string) *usageRecorder {
	ctx, cancel := context.WithCancel(ctx)
	r := &usageRecorder{began: time.Now(), cancel: cancel,
		trace: usageTrace{title: title, high: highThreshold, low: lowThreshold}}
	every := func(f func(context.Context)) {
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			t := time.NewTicker(recordEvery)
			defer t.Stop()
			for {
				f(ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	// Apart: a slow scrape must not leave gaps in the usage curve.
	every(func(context.Context) { r.readDisk(n) })
	every(r.readRuns)
	return r
}

// watchRuns makes the recorder read GC runs from scrape (nodegc's /metrics)
// from now on; nil stops that.
func (r *usageRecorder) watchRuns(scrape func(context.Context) ([]*dto.MetricFamily, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scrape, r.last = scrape, nil
}

// event marks a moment of the story on the plot.
func (r *usageRecorder) event(label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trace.events = append(r.trace.events, eventMark{at: time.Since(r.began), label: label})
}

// stop ends the sampling and returns what was recorded.
func (r *usageRecorder) stop() usageTrace {
	r.cancel()
	r.done.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trace
}

func (r *usageRecorder) readDisk(n *node.Node) {
	st, err := n.FSStats()
	if err != nil || st.Capacity == 0 {
		return
	}
	p := 100 - float64(min(st.Available, st.Capacity))*100/float64(st.Capacity)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trace.points = append(r.trace.points, usagePoint{at: time.Since(r.began), percent: p})
}

// readRuns scrapes nodegc and marks the runs counted since the last scrape
// (at the first scrape: since nodegc started).
func (r *usageRecorder) readRuns(ctx context.Context) {
	r.mu.Lock()
	scrape := r.scrape
	r.mu.Unlock()
	if scrape == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := scrape(ctx)
	if err != nil {
		return // nodegc starting or stopping: the next scrape counts the runs
	}
	at := time.Since(r.began)
	now := &runCounters{runs: map[runKey]float64{}, duration: map[runKey]float64{}}
	for _, s := range testbed.Samples(m) {
		for _, collector := range []string{"image", "container"} {
			switch s.Name {
			case "nodegc_" + collector + "_gc_runs_total":
				now.runs[runKey{collector, s.Labels["trigger"], s.Labels["result"]}] = s.Value
			case "nodegc_" + collector + "_gc_run_duration_seconds_sum":
				now.duration[runKey{collector, s.Labels["trigger"], ""}] = s.Value
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scrape == nil {
		return
	}
	prev := r.last
	if prev == nil {
		prev = &runCounters{}
	}
	r.last = now
	// Each run's duration: the growth of its trigger's duration sum over
	// the growth of its trigger's run count (several runs between two
	// scrapes share it).
	added := map[runKey]float64{}
	for k, v := range now.runs {
		added[runKey{k.collector, k.trigger, ""}] += v - prev.runs[k]
	}
	keys := make([]runKey, 0, len(now.runs))
	for k := range now.runs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		return a.collector+a.trigger+a.result < b.collector+b.trigger+b.result
	})
	for _, k := range keys {
		t := runKey{k.collector, k.trigger, ""}
		var each time.Duration
		if n := added[t]; n > 0 {
			each = time.Duration((now.duration[t] - prev.duration[t]) / n * float64(time.Second))
		}
		for i := prev.runs[k]; i < now.runs[k]; i++ {
			r.trace.runs = append(r.trace.runs, runMark{start: max(0, at-each), end: at, collector: k.collector, trigger: k.trigger, result: k.result})
		}
	}
}

// writeUsagePlot writes tr as an SVG file at path.
func writeUsagePlot(path string, tr usageTrace) error {
	if len(tr.points) == 0 {
		return fmt.Errorf("no reading of the image filesystem to plot")
	}
	return os.WriteFile(path, renderUsageSVG(tr), 0o644)
}

// Plot geometry, in SVG user units.
const (
	plotW, plotH                           = 960, 460
	marginL, marginR, marginT, marginB     = 60, 220, 50, 50
	innerW, innerH                         = plotW - marginL - marginR, plotH - marginT - marginB
	colorUsage, colorHigh, colorLow        = "#1f77b4", "#d62728", "#ff7f0e"
	colorImageRun, colorImageFail, colorCG = "#2ca02c", "#d62728", "#9467bd"
)

// renderUsageSVG draws the image filesystem's usage over time against the
// thresholds, with nodegc's image GC runs as vertical lines, its container
// GC runs as ticks on the time axis and the story's events as labelled
// dotted lines.
func renderUsageSVG(tr usageTrace) []byte {
	var end time.Duration
	for _, p := range tr.points {
		end = max(end, p.at)
	}
	for _, r := range tr.runs {
		end = max(end, r.end)
	}
	for _, e := range tr.events {
		end = max(end, e.at)
	}
	span := max(end.Seconds(), 1)
	x := func(d time.Duration) float64 { return marginL + d.Seconds()/span*innerW }
	y := func(percent float64) float64 { return marginT + (100-math.Max(0, math.Min(100, percent)))/100*innerH }

	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`, plotW, plotH, plotW, plotH)
	w(`<rect width="100%%" height="100%%" fill="white"/>`)
	w(`<text x="%d" y="24" font-size="16" font-weight="bold">%s</text>`, marginL, html.EscapeString(tr.title))

	// Axes and grid: usage every 20%, time in about 8 steps.
	for p := 0; p <= 100; p += 20 {
		w(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`, marginL, y(float64(p)), marginL+innerW, y(float64(p)))
		w(`<text x="%d" y="%.1f" text-anchor="end">%d%%</text>`, marginL-6, y(float64(p))+4, p)
	}
	step := niceStep(span / 8)
	for s := 0.0; s <= span+1e-9; s += step {
		xs := x(time.Duration(s * float64(time.Second)))
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`, xs, marginT, xs, marginT+innerH)
		w(`<text x="%.1f" y="%d" text-anchor="middle">%gs</text>`, xs, marginT+innerH+18, s)
	}
	w(`<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`, marginL, marginT, innerW, innerH)
	w(`<text x="%d" y="%d" text-anchor="middle">time since the workload began filling the disk</text>`, marginL+innerW/2, plotH-8)
	w(`<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">image filesystem usage</text>`, marginT+innerH/2, marginT+innerH/2)

	// Thresholds.
	for _, th := range []struct {
		name    string
		percent int
		color   string
	}{{"high", tr.high, colorHigh}, {"low", tr.low, colorLow}} {
		w(`<line class="threshold" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="6 4"/>`,
			marginL, y(float64(th.percent)), marginL+innerW, y(float64(th.percent)), th.color)
		w(`<text x="%d" y="%.1f" fill="%s">%s threshold %d%%</text>`, marginL+innerW+6, y(float64(th.percent))+4, th.color, th.name, th.percent)
	}

	// The story's events.
	for i, e := range tr.events {
		xe := x(e.at)
		w(`<line class="event" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#777" stroke-dasharray="2 3"/>`, xe, marginT, xe, marginT+innerH)
		w(`<text x="%.1f" y="%d" fill="#555" font-size="11">%s</text>`, xe+3, marginT+12+(i%4)*13, html.EscapeString(e.label))
	}

	// GC runs, from start to end: image GC as bands over the plot (red when
	// it failed), container GC as bars under the curve, on the time axis.
	images, containers := 0, 0
	for _, r := range tr.runs {
		x0, x1 := x(r.start), x(r.end)
		width := math.Max(2, x1-x0)
		title := fmt.Sprintf("<title>%s GC run, trigger %s, result %s, %.1fs to %.1fs</title>", r.collector,
			html.EscapeString(r.trigger), html.EscapeString(r.result), r.start.Seconds(), r.end.Seconds())
		switch r.collector {
		case "image":
			images++
			color := colorImageRun
			if r.result != "success" {
				color = colorImageFail
			}
			w(`<rect class="image-gc-run" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.35">%s</rect>`,
				x1-width, marginT, width, innerH, color, title)
		case "container":
			containers++
			w(`<rect class="container-gc-run" x="%.1f" y="%d" width="%.1f" height="8" fill="%s" opacity="0.7">%s</rect>`,
				x1-width, marginT+innerH-8, width, colorCG, title)
		}
	}

	// Usage.
	var pts strings.Builder
	for i, p := range tr.points {
		if i > 0 {
			pts.WriteByte(' ')
		}
		fmt.Fprintf(&pts, "%.1f,%.1f", x(p.at), y(p.percent))
	}
	w(`<polyline class="usage" points="%s" fill="none" stroke="%s" stroke-width="2"/>`, pts.String(), colorUsage)

	// Legend.
	lx, ly := marginL+innerW+6, marginT+innerH-100
	legend := []struct{ color, dash, text string }{
		{colorUsage, "", "usage"},
		{colorImageRun, "", fmt.Sprintf("image GC run (%d)", images)},
		{colorImageFail, "", "image GC run, failed"},
		{colorCG, "", fmt.Sprintf("container GC run (%d)", containers)},
		{"#777", "2 3", "demo step"},
	}
	for i, l := range legend {
		yy := ly + i*18
		w(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/>`, lx, yy, lx+20, yy, l.color, orNone(l.dash, "none"))
		w(`<text x="%d" y="%d">%s</text>`, lx+26, yy+4, html.EscapeString(l.text))
	}
	w(`</svg>`)
	return b.Bytes()
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}
