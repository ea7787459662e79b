package images_test

import (
	"fmt"
	"time"

	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// A Policy plans without the runtime: given the images, the disk and the
// time, it says what to remove, in order, and what to keep and why. Here the
// disk is 90% full (the default high threshold is 85%), so the plan frees
// down to the low threshold (80%): 100 MiB, least recently used first. The
// image in use stays, and so does the one pulled a minute ago (the minimum
// age is 2 minutes).
func Example() {
	const mib = 1 << 20
	policy := images.NewPolicy(config.Defaulted().ImageGC)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	node := []images.Image{
		{ID: "sha256:aaa", RepoTags: []string{"registry.example.com/app:v1"}, Size: 300 * mib,
			FirstDetected: now.Add(-48 * time.Hour), LastUsed: now.Add(-24 * time.Hour)},
		{ID: "sha256:bbb", RepoTags: []string{"registry.example.com/app:v2"}, Size: 200 * mib,
			FirstDetected: now.Add(-time.Hour), LastUsed: now, InUse: true},
		{ID: "sha256:ccc", RepoTags: []string{"registry.example.com/tool:v1"}, Size: 50 * mib,
			FirstDetected: now.Add(-time.Minute)},
	}
	disk := images.DiskStats{Capacity: 1000 * mib, Available: 100 * mib}
	plan, err := policy.Plan(node, disk, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("usage %d%%, to free %d MiB\n", plan.UsagePercent, plan.BytesToFree/mib)
	for _, d := range plan.Remove {
		fmt.Printf("remove %s (%s, %d MiB)\n", d.Image.RepoTags[0], d.Reason, d.Bytes/mib)
	}
	for _, d := range plan.Keep {
		fmt.Printf("keep %s (%s)\n", d.Image.RepoTags[0], d.Reason)
	}
	// Output:
	// usage 90%, to free 100 MiB
	// remove registry.example.com/app:v1 (space, 300 MiB)
	// keep registry.example.com/app:v2 (in_use)
	// keep registry.example.com/tool:v1 (min_age)
}
