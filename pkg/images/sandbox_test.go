package images

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestSandboxMatchesEveryForm: the runtime's sandbox image is written in
// its config the way operators write references (familiar, tag and
// digest, an ID), while CRI lists the image fully qualified, by tag or by
// digest only: the sandbox image is recognised in every form, and no
// other image is taken for it.
func TestSandboxMatchesEveryForm(t *testing.T) {
	const (
		id     = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		digest = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
		other  = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
	)
	for name, tc := range map[string]struct {
		sandbox       string
		tags, digests []string
		want          bool
	}{
		"as listed":                      {"registry.k8s.io/pause:3.10", []string{"registry.k8s.io/pause:3.10"}, nil, true},
		"hub user, familiar":             {"rancher/mirrored-pause:3.6", []string{"docker.io/rancher/mirrored-pause:3.6"}, nil, true},
		"hub official, familiar":         {"pause:3.6", []string{"docker.io/library/pause:3.6"}, nil, true},
		"legacy hub":                     {"index.docker.io/rancher/mirrored-pause:3.6", []string{"docker.io/rancher/mirrored-pause:3.6"}, nil, true},
		"no tag is latest":               {"registry.example/pause", []string{"registry.example/pause:latest"}, nil, true},
		"tag and digest, listed by both": {"registry.k8s.io/pause:3.10@" + digest, []string{"registry.k8s.io/pause:3.10"}, []string{"registry.k8s.io/pause@" + digest}, true},
		"tag and digest, digest only":    {"registry.k8s.io/pause:3.10@" + digest, nil, []string{"registry.k8s.io/pause@" + digest}, true},
		"digest":                         {"registry.k8s.io/pause@" + digest, nil, []string{"registry.k8s.io/pause@" + digest}, true},
		"image ID":                       {id, []string{"registry.example/anything:1"}, nil, true},
		"image ID without algorithm":     {id[len("sha256:"):], nil, nil, true},
		"other tag":                      {"registry.k8s.io/pause:3.10", []string{"registry.k8s.io/pause:3.9"}, nil, false},
		"other registry":                 {"rancher/mirrored-pause:3.6", []string{"quay.io/rancher/mirrored-pause:3.6"}, nil, false},
		"other digest":                   {"registry.k8s.io/pause@" + other, nil, []string{"registry.k8s.io/pause@" + digest}, false},
		"latest is only the untagged":    {"registry.example/pause", []string{"registry.example/pause:3.10"}, nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			m := &Manager{opts: Options{SandboxImages: []string{tc.sandbox}}}
			in := []Image{{ID: id, RepoTags: tc.tags, RepoDigests: tc.digests}}
			if err := m.markSandbox(t.Context(), in); err != nil {
				t.Fatal(err)
			}
			if in[0].Sandbox != tc.want {
				t.Errorf("sandbox image %q, image %s tags %q digests %q: Sandbox = %v, want %v",
					tc.sandbox, in[0].ID, tc.tags, tc.digests, in[0].Sandbox, tc.want)
			}
		})
	}
}

// fakeSandboxes is a sandbox source whose answer the test sets.
type fakeSandboxes struct {
	mu    sync.Mutex
	names []string
	err   error
}

func (f *fakeSandboxes) SandboxImages(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names), f.err
}

func (f *fakeSandboxes) set(names []string, err error) {
	f.mu.Lock()
	f.names, f.err = names, err
	f.mu.Unlock()
}

// TestSandboxesOfTheRuntime: the images the runtime's sandboxes run are
// sandbox images whatever the runtime's config says (containerd 2.x says
// nothing); when the runtime cannot say, no plan is made; and a sandbox
// that appears after the plan keeps its image at the check before the
// removal.
func TestSandboxesOfTheRuntime(t *testing.T) {
	const pauseID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	src := &fakeSandboxes{}
	m, err := NewManager(Options{Config: policyConfig(), StateDirectory: t.TempDir(), Runtime: &streamRuntime{},
		Disk: &scriptedDisk{}, Sandboxes: src})
	if err != nil {
		t.Fatal(err)
	}
	pause := func() []Image {
		return []Image{
			{ID: pauseID, RepoTags: []string{"docker.io/rancher/mirrored-pause:3.6"}},
			{ID: "sha256:22", RepoTags: []string{"docker.io/library/nginx:1.27"}},
		}
	}
	ctx := t.Context()
	for _, names := range [][]string{{"rancher/mirrored-pause:3.6"}, {pauseID}, {"docker.io/rancher/mirrored-pause:3.6"}} {
		src.set(names, nil)
		in := pause()
		if err := m.markSandbox(ctx, in); err != nil {
			t.Fatal(err)
		}
		if !in[0].Sandbox || in[1].Sandbox {
			t.Errorf("a sandbox runs %q: Sandbox flags %v, %v; want true, false", names, in[0].Sandbox, in[1].Sandbox)
		}
	}

	injected := errors.New("containerd: connection refused")
	src.set(nil, injected)
	if err := m.markSandbox(ctx, pause()); !errors.Is(err, injected) {
		t.Errorf("sandboxes unknown: markSandbox error %v, want %v", err, injected)
	}
	check := m.checkBeforeRemoval(ctx)
	if _, err := check(&pause()[0]); !errors.Is(err, injected) {
		t.Errorf("sandboxes unknown at the check before a removal: error %v, want %v (the run stops)", err, injected)
	}

	src.set(nil, nil)
	if keep, err := check(&pause()[0]); keep != "" || err != nil {
		t.Errorf("no sandbox, no container: check = %q, %v; want it removable", keep, err)
	}
	src.set([]string{"docker.io/rancher/mirrored-pause:3.6"}, nil) // a pod started after the plan
	if keep, err := check(&pause()[0]); keep != KeepSandbox || err != nil {
		t.Errorf("a sandbox started after the plan: check = %q, %v; want kept as %q", keep, err, KeepSandbox)
	}
	if keep, err := check(&pause()[1]); keep != "" || err != nil {
		t.Errorf("an image no sandbox runs: check = %q, %v; want it removable", keep, err)
	}
}

// TestSandboxImageRemembered: while no sandbox runs, the image the
// sandboxes last ran is still the sandbox image (containerd 2.x names it
// nowhere else when its config writes it in another form), also for a
// manager started again on the same state, and one built without a way to
// list the sandboxes; once sandboxes run another
// image (the pause image was upgraded), the old one is not.
func TestSandboxImageRemembered(t *testing.T) {
	const (
		oldID = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		newID = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	listing := []*runtimeapi.Image{
		{Id: oldID, RepoTags: []string{"registry.k8s.io/pause:3.9"}},
		{Id: newID, RepoTags: []string{"registry.k8s.io/pause:3.10"}},
		{Id: "sha256:33", RepoTags: []string{"docker.io/library/nginx:1.27"}},
	}
	dir := t.TempDir()
	src := &fakeSandboxes{}
	newManager := func() *Manager {
		m, err := NewManager(Options{Config: policyConfig(), StateDirectory: dir, Runtime: &streamRuntime{},
			Disk: &scriptedDisk{}, Sandboxes: src, Clock: clocktesting.NewFakeClock(t0)})
		if err != nil {
			t.Fatal(err)
		}
		m.tracker.applyImages(listing, t0)
		return m
	}
	sandboxes := func(m *Manager) []string {
		t.Helper()
		in, _ := m.tracker.planInput(listing)
		if err := m.markSandbox(t.Context(), in); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, img := range in {
			if img.Sandbox {
				out = append(out, img.RepoTags[0])
			}
		}
		return out
	}
	m := newManager()
	if got := sandboxes(m); got != nil {
		t.Errorf("no sandbox ever seen: sandbox images %q, want none", got)
	}
	src.set([]string{"registry.k8s.io/pause:3.9"}, nil)
	if got := sandboxes(m); !slices.Equal(got, []string{"registry.k8s.io/pause:3.9"}) {
		t.Errorf("a sandbox runs pause:3.9: sandbox images %q", got)
	}
	src.set(nil, nil) // its pod is gone
	if got := sandboxes(m); !slices.Equal(got, []string{"registry.k8s.io/pause:3.9"}) {
		t.Errorf("no sandbox left: sandbox images %q, want the one the sandboxes last ran", got)
	}
	if err := m.saveState(true); err != nil {
		t.Fatal(err)
	}
	m = newManager() // the agent restarted
	if got := sandboxes(m); !slices.Equal(got, []string{"registry.k8s.io/pause:3.9"}) {
		t.Errorf("after a restart, no sandbox: sandbox images %q, want the remembered one", got)
	}
	// Built without a sandbox source (containerd's own API did not answer
	// when the GC was built): the remembered one is still kept.
	m.opts.Sandboxes = nil
	if got := sandboxes(m); !slices.Equal(got, []string{"registry.k8s.io/pause:3.9"}) {
		t.Errorf("no sandbox source: sandbox images %q, want the remembered one", got)
	}
	m.opts.Sandboxes = src
	src.set([]string{"registry.k8s.io/pause:3.10"}, nil) // upgraded
	sandboxes(m)
	src.set(nil, nil)
	if got := sandboxes(m); !slices.Equal(got, []string{"registry.k8s.io/pause:3.10"}) {
		t.Errorf("after an upgrade, no sandbox: sandbox images %q, want only the new one", got)
	}
}
