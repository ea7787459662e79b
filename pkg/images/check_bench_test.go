package images

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/diskstats"
)

// fsOnlyRuntime answers ImageFsInfo with a mountpoint: all a disk check
// asks of the runtime (once; the mountpoint is then cached).
type fsOnlyRuntime struct {
	RuntimeService
	mountpoint string
}

func (r fsOnlyRuntime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{
		{FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: r.mountpoint}},
	}}, nil
}

// BenchmarkDiskCheck measures one iteration of the per-second disk check
// with nothing to collect: reading the image filesystem (cadvisor's device
// lookup, then statfs(2) of its mount point, as pkg/diskstats does), the
// gauges, the fill-rate window and the projection. The clock advances a
// second per check, so the window holds five readings, as it does live.
func BenchmarkDiskCheck(b *testing.B) {
	cfg := policyConfig()
	cfg.HighThresholdPercent, cfg.LowThresholdPercent = ptr.To[int32](99), ptr.To[int32](98) // never reached here
	clk := testclock.NewFakeClock(t0)
	m, err := NewManager(Options{Config: cfg, StateDirectory: b.TempDir(), Runtime: fsOnlyRuntime{mountpoint: b.TempDir()},
		Disk: diskstats.NewReader(), Clock: clk, PlanOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var backoff thresholdBackoff
	m.checkDisk(ctx, &backoff, checkAtInterval) // resolve and cache the mountpoint
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clk.Step(1e9)
		m.checkDisk(ctx, &backoff, checkAtInterval)
	}
}
