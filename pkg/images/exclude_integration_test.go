package images_test

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	ctrimages "github.com/containerd/containerd/v2/core/images"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestExclusionsOnContainerd: on a real containerd, images carry names in
// every form an operator meets (pulled from a registry with a port, or
// named docker.io/library/..., registry.example/team/..., docker.io/team/...
// in containerd's k8s.io namespace, which CRI then lists), and exclusions
// are written as operators write references: familiar names, ** for any
// registry, a wildcard port, a name without a tag, an image ID prefix, a
// manifest digest in any repository, one quoted with spaces around it. A GC
// asked to free everything removable keeps exactly the excluded images
// (and the sandbox image) and removes the others.
func TestExclusionsOnContainerd(t *testing.T) {
	t.Parallel()
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			t.Parallel()
			b := newBed(t, v, 256*mib)
			ctx := t.Context()
			ctr := b.containerd()

			// Every image is pulled as 127.0.0.1:PORT/src/<name>:v1; some
			// get one more name, which is then the only one a pattern
			// below can match.
			type image struct {
				pulled   string // repository in the test registry
				alias    string // extra name in containerd, or ""
				excluded bool
			}
			imgs := map[string]image{
				"hub official":        {pulled: "src/hub-agent", alias: "docker.io/library/critical-agent:1", excluded: true},
				"other registry":      {pulled: "src/reg-agent", alias: "registry.example/team/critical-agent:1", excluded: true},
				"familiar nginx":      {pulled: "src/web", alias: "docker.io/library/nginx:1.25", excluded: true},
				"nginx elsewhere":     {pulled: "src/quay-web", alias: "quay.io/library/nginx:1.25"},
				"hub user repository": {pulled: "src/team-app", alias: "docker.io/team/app:v2", excluded: true},
				"quoted with spaces":  {pulled: "src/spaced", alias: "registry.example/team/spaced:1", excluded: true},
				"longer hub name":     {pulled: "src/team-app-old", alias: "docker.io/team/app-old:v2"},
				"wildcard port":       {pulled: "src/port-kept", excluded: true},
				"image ID":            {pulled: "src/by-id", excluded: true},
				"manifest digest":     {pulled: "src/by-digest", excluded: true},
				"not excluded":        {pulled: "src/gone"},
			}
			ids, digests := map[string]string{}, map[string]string{} // case -> image ID, manifest digest
			for name, im := range imgs {
				pushed := b.pushPull(im.pulled, 2)
				ids[name], digests[name] = pushed.ID(), pushed.ManifestDigest
				if im.alias == "" {
					continue
				}
				src, err := ctr.ImageService().Get(ctx, pushed.Ref)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ctr.ImageService().Create(ctx, ctrimages.Image{Name: im.alias, Target: src.Target, Labels: src.Labels}); err != nil {
					t.Fatalf("naming %s %s: %v", pushed.Ref, im.alias, err)
				}
			}
			// CRI learns of the new names from containerd's events.
			deadline := time.Now().Add(30 * time.Second)
			for {
				tags := b.repoTags()
				missing := []string{}
				for name, im := range imgs {
					if im.alias != "" && !slices.Contains(tags[ids[name]], im.alias) {
						missing = append(missing, im.alias)
					}
				}
				if len(missing) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("CRI ListImages does not report %v in RepoTags after 30s: %v", missing, tags)
				}
				time.Sleep(100 * time.Millisecond)
			}

			exclude := []string{
				"nginx:*",                          // docker.io/library/nginx, not quay.io/library/nginx
				"**/critical-agent:*",              // any registry, any depth
				"team/app:v2",                      // docker.io/team/app:v2, not docker.io/team/app-old
				" registry.example/team/spaced:1 ", // as quoted in YAML, spaces and all
				"127.0.0.1:*/src/port-kept",
				ids["image ID"][:len("sha256:")+12] + "*",
				"**@" + digests["manifest digest"],
			}
			m := b.manager(t.TempDir(), clocktesting.NewFakeClock(time.Now()), func(c *config.ImageGCConfiguration) {
				setThresholds(1, 0)(c) // free everything removable
				c.Exclude = exclude
			})
			r, err := m.GarbageCollect(ctx, images.TriggerManual)
			var fe *images.FreeDiskSpaceError
			if err != nil && !errors.As(err, &fe) {
				t.Fatal(err)
			}

			present := b.imageIDs()
			gotKept, wantKept := map[string]bool{}, map[string]bool{}
			for name, im := range imgs {
				gotKept[name] = present[ids[name]]
				wantKept[name] = im.excluded
			}
			if diff := cmp.Diff(wantKept, gotKept); diff != "" {
				t.Errorf("exclude %q: images kept (-want +got):\n%s", exclude, diff)
			}
			if !present[b.node.Pause.ID()] {
				t.Error("the sandbox image was removed")
			}
			planExcluded := map[string]bool{}
			for _, d := range r.Plan.Keep {
				if d.Reason == images.KeepExcluded {
					planExcluded[d.Image.ID] = true
				}
			}
			wantExcluded := map[string]bool{}
			for name, im := range imgs {
				if im.excluded {
					wantExcluded[ids[name]] = true
				}
			}
			if diff := cmp.Diff(slices.Sorted(maps.Keys(wantExcluded)), slices.Sorted(maps.Keys(planExcluded))); diff != "" {
				t.Errorf("image IDs the plan keeps as excluded (-want +got):\n%s", diff)
			}
		})
	}
}

// repoTags returns the RepoTags CRI lists, by image ID.
func (b *bed) repoTags() map[string][]string {
	b.t.Helper()
	list, err := b.cri.ListImages(b.t.Context())
	if err != nil {
		b.t.Fatal(err)
	}
	tags := map[string][]string{}
	for _, img := range list {
		tags[img.GetId()] = img.GetRepoTags()
	}
	return tags
}
