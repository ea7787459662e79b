package images

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// TestNewManagerRejects: NewManager validates its configuration as the
// agent does (config.ValidateImageGC); NewPolicy trusts it.
func TestNewManagerRejects(t *testing.T) {
	newManager := func(c config.ImageGCConfiguration) error {
		_, err := NewManager(Options{Config: c, StateDirectory: t.TempDir(), Runtime: &streamRuntime{}, Disk: fixedDisk{}})
		return err
	}
	if err := newManager(config.Defaulted().ImageGC); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*config.ImageGCConfiguration){
		"low not below high": func(c *config.ImageGCConfiguration) { c.LowThresholdPercent = ptr.To[int32](85) },
		"max age below min":  func(c *config.ImageGCConfiguration) { c.MaximumGCAge = &metav1.Duration{Duration: time.Minute} },
		"bad glob":           func(c *config.ImageGCConfiguration) { c.Exclude = []string{"["} },
		"unset":              func(c *config.ImageGCConfiguration) { c.MinimumGCAge = nil },
	} {
		c := config.Defaulted().ImageGC
		mutate(&c)
		err := newManager(c)
		if err == nil {
			t.Errorf("%s: NewManager succeeded", name)
			continue
		}
		if !strings.HasPrefix(err.Error(), "image GC: ") || !strings.Contains(err.Error(), "imageGC.") {
			t.Errorf("%s: NewManager: %v, want the configuration's problem with its field path", name, err)
		}
	}
}

// refusedDisk answers every read with err.
type refusedDisk struct{ err error }

func (d refusedDisk) Stat(string) (diskstats.Stats, error) { return diskstats.Stats{}, d.err }

// TestImplausibleDiskReading: a reading of the image filesystem no
// filesystem can give (more available than its capacity; statfs numbers
// whose product passes 2^64 bytes, which pkg/diskstats refuses) is an
// invalid capacity, as capacity 0 is: no run acts on it, and it is counted
// and reported as such (InvalidDiskCapacity).
func TestImplausibleDiskReading(t *testing.T) {
	for name, disk := range map[string]DiskReader{
		"capacity 0":                   statsDisk{Available: 10 * mib},
		"more available than capacity": statsDisk{Capacity: 100 * mib, Available: 200 * mib},
		"statfs refused":               refusedDisk{fmt.Errorf("statfs /images: %w: 1152921504606846976 blocks of 4096 bytes pass 2^64 bytes", diskstats.ErrImplausible)},
	} {
		t.Run(name, func(t *testing.T) {
			rt := &removalsRuntime{images: []*runtimeapi.Image{{Id: "sha256:aa", RepoTags: []string{"registry.example/a:1"}, Size: 30 * mib}}}
			reg := prometheus.NewRegistry()
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, Registerer: reg})
			m.opts.Disk = disk
			_, err := m.GarbageCollect(t.Context(), TriggerThreshold)
			if !errors.Is(err, ErrInvalidDiskCapacity) {
				t.Errorf("run error %v, want ErrInvalidDiskCapacity", err)
			}
			if len(rt.removed) > 0 {
				t.Errorf("removed %v on an invalid reading", rt.removed)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := testbed.MetricSum(families, "nodegc_image_gc_runs_total", "result="+resultNoCapacity); got != 1 {
				t.Errorf("nodegc_image_gc_runs_total{result=%q} = %v, want 1", resultNoCapacity, got)
			}
		})
	}
}
