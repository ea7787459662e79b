package images

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unique"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkPlan measures one planning step of a GC run on a large node:
// reconcile usage with a listing of 10,000 images and 50,000 containers,
// join it into the planner's input, and plan (with layer accounting).
// Goal: at most 20 ms per plan. Sub-benchmarks: "quiet" lists the same
// containers every time; "churn" replaces 1% of them before each plan;
// "policy" is the pure Plan alone on the joined input. Listings come in a
// new order every time, as containerd lists containers in map order.
func BenchmarkPlan(b *testing.B) {
	const nImages, nContainers, layersPerImage = 10000, 50000, 8
	rng := rand.New(rand.NewPCG(1, 2))
	images := make([]*runtimeapi.Image, nImages)
	for i := range images {
		images[i] = &runtimeapi.Image{
			Id:          fmt.Sprintf("sha256:%064d", i),
			RepoTags:    []string{fmt.Sprintf("registry.example.com/team%d/app%d:v%d", i%50, i%700, i)},
			RepoDigests: []string{fmt.Sprintf("registry.example.com/team%d/app%d@sha256:%064d", i%50, i%700, i)},
			Size:        uint64(rng.IntN(500)+1) * mib,
		}
	}
	newContainer := func(i int) *runtimeapi.Container {
		// A fifth of the images are used, some by many containers.
		img := images[rng.IntN(nImages/5)]
		return &runtimeapi.Container{Id: fmt.Sprintf("%064x", rng.Uint64()) + fmt.Sprint(i), ImageRef: img.Id, State: runtimeapi.ContainerState(rng.IntN(3))}
	}
	containers := make([]*runtimeapi.Container, nContainers)
	for i := range containers {
		containers[i] = newContainer(i)
	}
	p := NewPolicy(policyConfig())
	// Layers: a few shared bases, the rest per image.
	layers := make(map[string][]Layer, nImages)
	for i, img := range images {
		ls := []Layer{{Key: unique.Make(fmt.Sprintf("base%d", i%20)), Size: 80 * mib}}
		for j := 1; j < layersPerImage; j++ {
			ls = append(ls, Layer{Key: unique.Make(fmt.Sprintf("l%d-%d", i, j)), Size: uint64(rng.IntN(50)) * mib})
		}
		layers[img.Id] = ls
	}
	disk := DiskStats{Capacity: 2000 << 30, Available: 100 << 30}
	listed := func(context.Context) ([]*runtimeapi.Container, error) { return containers, nil }
	plan := func(b *testing.B, tr *Tracker) {
		// As Manager.Plan does: the container listing, then the images.
		if _, err := tr.syncContainers(b.Context(), listed); err != nil {
			b.Fatal(err)
		}
		// An hour after the watch began: every image is past the
		// minimum age, which counts from the watch's start at the
		// earliest.
		now := t0.Add(time.Hour)
		tr.applyImages(images, now)
		in, _ := tr.planInput(images)
		for i := range in {
			in[i].Layers = layers[in[i].ID]
		}
		plan, err := p.Plan(in, disk, now)
		if err != nil || len(plan.Remove) == 0 {
			b.Fatalf("plan: %v, %d removals", err, len(plan.Remove))
		}
	}
	newTracker := func(b *testing.B) *Tracker {
		tr, warn := NewTracker(b.TempDir(), t0)
		if warn != nil {
			b.Fatal(warn)
		}
		reconcile(tr, images, containers, t0.Add(-time.Hour))
		return tr
	}

	// shuffle makes the next listing: the same containers in a new order,
	// decoded afresh (new objects, allocated in listing order, as gRPC
	// decodes a ListContainers response).
	shuffle := func() {
		rng.Shuffle(len(containers), func(i, j int) { containers[i], containers[j] = containers[j], containers[i] })
		for i, c := range containers {
			containers[i] = &runtimeapi.Container{Id: strings.Clone(c.Id), ImageRef: strings.Clone(c.ImageRef), ImageId: strings.Clone(c.ImageId), State: c.State}
		}
	}
	b.Run("quiet", func(b *testing.B) {
		tr := newTracker(b)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			shuffle()
			b.StartTimer()
			plan(b, tr)
		}
	})
	b.Run("churn", func(b *testing.B) {
		tr := newTracker(b)
		b.ReportAllocs()
		next := nContainers
		for b.Loop() {
			b.StopTimer()
			for range nContainers / 100 {
				containers[rng.IntN(nContainers)] = newContainer(next)
				next++
			}
			shuffle()
			b.StartTimer()
			plan(b, tr)
		}
	})
	b.Run("policy", func(b *testing.B) {
		tr := newTracker(b)
		in, _ := tr.planInput(images)
		for i := range in {
			in[i].Layers = layers[in[i].ID]
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Plan(in, disk, t0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSaveState measures one write of the usage records of 10,000
// images (marshal, write, fsync, rename, fsync of the directory): the
// most the manager does per saveInterval while usage changes.
func BenchmarkSaveState(b *testing.B) {
	usage := make(map[string]Usage, 10000)
	now := time.Now()
	for i := range 10000 {
		usage[fmt.Sprintf("sha256:%064d", i)] = Usage{FirstDetected: now.Add(-time.Duration(i) * time.Minute), LastUsed: now}
	}
	dir := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		if err := saveState(dir, "", usage, time.Time{}, time.Time{}, bootReading{}); err != nil {
			b.Fatal(err)
		}
	}
}
