package images

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/pkg/config"
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
