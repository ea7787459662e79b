package images

import (
	"testing"

	"github.com/nodegc/nodegc/pkg/diskstats"
)

// holdingDisk is an image filesystem of 1000 bytes: 100 bytes of other
// data plus what each image of rt really holds on it (perImage: its
// compressed blobs and unpacked snapshots), whatever CRI says its Size is.
// Removals free their bytes as the runtime returns, as containerd's and
// CRI-O's do.
type holdingDisk struct {
	rt       *shrinkingRuntime
	perImage uint64
}

func (d *holdingDisk) Stat(string) (diskstats.Stats, error) {
	d.rt.mu.Lock()
	n := uint64(len(d.rt.images))
	d.rt.mu.Unlock()
	return diskstats.Stats{Capacity: 1000, Available: 1000 - 100 - n*d.perImage}, nil
}

// reportsOf has the bed's manager options keep every run's report in
// reports, the bed's count of runs going on.
func reportsOf(reports *[]*Report) func(*Options) {
	return func(o *Options) {
		counted := o.OnRun
		o.OnRun = func(r *Report) {
			counted(r)
			*reports = append(*reports, r)
		}
	}
}

// TestSpaceRemovalsStopAtGoal: no exact accounting (containerd's API not
// answering, or CRI-O): CRI says each image holds 10 bytes (containerd:
// its compressed content), while removing it frees 40 (blobs and unpacked
// layers). 20 images: usage 90%, high 80, low 75: 150 bytes to free, 15
// images by CRI sizes, 4 on the disk. The run reads the image filesystem
// before each space removal and stops once it reached the low threshold:
// 4 removals, the 11 others left at the goal and said so in the report.
// (Before, the run trusted the CRI sizes to the end: 15 removed, usage
// 30%.)
func TestSpaceRemovalsStopAtGoal(t *testing.T) {
	var reports []*Report
	b, rt := newShrinkingBed(t, 20, reportsOf(&reports))
	for _, img := range rt.images {
		img.Size = 10
	}
	d := &holdingDisk{rt: rt, perImage: 40}
	b.m.opts.Disk = d
	if !b.check() {
		t.Fatal("no run at 90%")
	}
	st, _ := d.Stat("")
	usage := DiskStats{Capacity: st.Capacity, Available: st.Available}.UsagePercent()
	if removed := 20 - len(rt.images); removed != 4 || usage > 75 || usage < 72 {
		t.Errorf("one run removed %d images, usage now %d%%; want 4 removed, usage at or just under the low threshold (75%%)", removed, usage)
	}
	if len(reports) != 1 || reports[0].Outcome == nil {
		t.Fatalf("reports %v, want one with an outcome", reports)
	}
	o := reports[0].Outcome
	if o.LeftAtGoal != 11 || reports[0].Err != nil {
		t.Errorf("the report says %d planned removals left at the goal (error %v), want 11 and no error", o.LeftAtGoal, reports[0].Err)
	}
	if got := b.checks(5); len(got) > 0 {
		t.Errorf("runs at ticks %v after the run reached the low threshold, want none", got)
	}
}

// TestSpaceRemovalsStopAtProjectedGoal: a run started ahead of a fill
// (trigger projected: 200 bytes to arrive within the horizon) frees down to
// the low threshold from the projected usage: its goal is 450 bytes
// available, not the low threshold's 250, which the disk (300 available)
// is past already. 4 images of 40 bytes on disk go, not none.
func TestSpaceRemovalsStopAtProjectedGoal(t *testing.T) {
	b, rt := newShrinkingBed(t, 15, nil)
	for _, img := range rt.images {
		img.Size = 10
	}
	b.m.opts.Disk = &holdingDisk{rt: rt, perImage: 40} // 700 used: 70%
	r, err := b.m.collectFor(t.Context(), TriggerProjected, demand{ahead: 200})
	if err != nil {
		t.Fatal(err)
	}
	if removed := 15 - len(rt.images); removed != 4 || r.Outcome.LeftAtGoal != 11 {
		t.Errorf("the projected run removed %d images, left %d at the goal; want 4 removed (450 bytes available), 11 left", removed, r.Outcome.LeftAtGoal)
	}
}
