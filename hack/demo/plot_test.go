package main

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodegc/nodegc/internal/testbed"
)

// svgElement is enough of an SVG element to find the plot's parts.
type svgElement struct {
	XMLName  xml.Name
	Class    string       `xml:"class,attr"`
	Points   string       `xml:"points,attr"`
	Y1       string       `xml:"y1,attr"`
	Stroke   string       `xml:"stroke,attr"`
	Fill     string       `xml:"fill,attr"`
	Text     string       `xml:",chardata"`
	Children []svgElement `xml:",any"`
}

func (e svgElement) all(class string) []svgElement {
	var out []svgElement
	if e.Class == class {
		out = append(out, e)
	}
	for _, c := range e.Children {
		out = append(out, c.all(class)...)
	}
	return out
}

func TestUsagePlot(t *testing.T) {
	s := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }
	tr := usageTrace{title: "usage <of> & demo", high: 80, low: 60,
		points: []usagePoint{{s(0), 20}, {s(1), 55}, {s(2), 86.5}, {s(3), 86.5}, {s(4), 70}, {s(5), 70}},
		runs: []runMark{
			{s(2.1), s(2.5), "image", "threshold", "success"},
			{s(2.9), s(3), "container", "periodic", "success"},
			{s(3.1), s(3.2), "image", "threshold", "failed"},
			{s(4), s(4), "container", "periodic", "success"},
		},
		events: []eventMark{{s(2.2), "nodegc started"}, {s(4.5), "Deployment web deleted"}},
	}
	path := filepath.Join(t.TempDir(), "usage.svg")
	if err := writeUsagePlot(path, tr); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		t.Fatal("the plot is empty")
	}
	var root svgElement
	if err := xml.Unmarshal(data, &root); err != nil {
		t.Fatalf("the plot is not well-formed XML: %v\n%s", err, data)
	}
	if root.XMLName.Local != "svg" {
		t.Fatalf("root element %q, want svg", root.XMLName.Local)
	}
	usage := root.all("usage")
	if len(usage) != 1 || len(strings.Fields(usage[0].Points)) != len(tr.points) {
		t.Fatalf("want one usage polyline of %d points, got %+v", len(tr.points), usage)
	}
	// The highest reading is drawn above (smaller y) the high threshold,
	// the last one between the thresholds.
	th := root.all("threshold")
	if len(th) != 2 {
		t.Fatalf("want 2 threshold lines, got %d", len(th))
	}
	pts := strings.Fields(usage[0].Points)
	yOf := func(pt string) string { _, y, _ := strings.Cut(pt, ","); return y }
	if !(num(t, yOf(pts[2])) < num(t, th[0].Y1) && num(t, th[0].Y1) < num(t, yOf(pts[5])) && num(t, yOf(pts[5])) < num(t, th[1].Y1)) {
		t.Errorf("usage 86.5%% at y=%s, high at y=%s, usage 70%% at y=%s, low at y=%s: not in that order from the top",
			yOf(pts[2]), th[0].Y1, yOf(pts[5]), th[1].Y1)
	}
	runs := root.all("image-gc-run")
	if len(runs) != 2 || runs[0].Fill == runs[1].Fill {
		t.Errorf("want 2 image GC runs, the failed one in another color: %+v", runs)
	}
	if n := len(root.all("container-gc-run")); n != 2 {
		t.Errorf("want 2 container GC run ticks, got %d", n)
	}
	if n := len(root.all("event")); n != 2 {
		t.Errorf("want 2 event lines, got %d", n)
	}
	if !strings.Contains(string(data), "usage &lt;of&gt; &amp; demo") {
		t.Error("the title is not escaped")
	}

	if err := writeUsagePlot(filepath.Join(t.TempDir(), "empty.svg"), usageTrace{}); err == nil {
		t.Error("a trace without readings was plotted")
	}
}

func num(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 7: 10, 12: 20, 31: 50, 180: 200} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}

// TestUsageRecorderRuns: each run counted between two scrapes becomes a
// mark whose length is its share of the duration histogram's growth.
func TestUsageRecorderRuns(t *testing.T) {
	scrapes := []string{
		// nodegc's first scrape: one image GC run so far.
		`nodegc_image_gc_runs_total{trigger="threshold",result="success"} 1
nodegc_image_gc_run_duration_seconds_sum{trigger="threshold"} 2
nodegc_container_gc_runs_total{trigger="periodic",result="success"} 0
nodegc_container_gc_run_duration_seconds_sum{trigger="periodic"} 0
`,
		// Then two container GC runs of 0.5s in all, one of them failed.
		`nodegc_image_gc_runs_total{trigger="threshold",result="success"} 1
nodegc_image_gc_run_duration_seconds_sum{trigger="threshold"} 2
nodegc_container_gc_runs_total{trigger="periodic",result="success"} 1
nodegc_container_gc_runs_total{trigger="periodic",result="failed"} 1
nodegc_container_gc_run_duration_seconds_sum{trigger="periodic"} 0.5
`,
		// Nothing new.
		`nodegc_image_gc_runs_total{trigger="threshold",result="success"} 1
nodegc_image_gc_run_duration_seconds_sum{trigger="threshold"} 2
nodegc_container_gc_runs_total{trigger="periodic",result="success"} 1
nodegc_container_gc_runs_total{trigger="periodic",result="failed"} 1
nodegc_container_gc_run_duration_seconds_sum{trigger="periodic"} 0.5
`,
	}
	r := &usageRecorder{began: time.Now().Add(-10 * time.Second)}
	r.readRuns(t.Context()) // before watchRuns: no scrape, nothing marked
	next := 0
	r.watchRuns(func(context.Context) ([]*dto.MetricFamily, error) {
		m, err := testbed.ParseMetrics(strings.NewReader(scrapes[next]))
		next++
		return m, err
	})
	for range scrapes {
		r.readRuns(t.Context())
	}
	runs := r.trace.runs
	if len(runs) != 3 {
		t.Fatalf("want 3 runs marked, got %+v", runs)
	}
	var image, failed, ok int
	for _, m := range runs {
		length := m.end - m.start
		switch {
		case m.collector == "image" && m.result == "success":
			image++
			if length != 2*time.Second {
				t.Errorf("image GC run marked %v long, want 2s", length)
			}
		case m.collector == "container" && m.result == "failed":
			failed++
		case m.collector == "container" && m.result == "success":
			ok++
		}
		if m.collector == "container" && length != 250*time.Millisecond {
			t.Errorf("container GC run marked %v long, want its half of 0.5s", length)
		}
	}
	if image != 1 || failed != 1 || ok != 1 {
		t.Errorf("runs marked: %+v", runs)
	}
}
