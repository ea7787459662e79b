package agent

import (
	"slices"
	"strings"
	"testing"
)

// TestRuntimeProfileChanges: the GC is built again for any fact of the
// runtime's profile that differs, and for one it could not read before
// (read now, or not readable any more); never for an error's other wording.
func TestRuntimeProfileChanges(t *testing.T) {
	base := runtimeProfile{name: "containerd", version: "1.7.27", sandboxImage: "registry.k8s.io/pause:3.8",
		imageFs: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"}
	with := func(f func(*runtimeProfile)) runtimeProfile {
		p := base
		f(&p)
		return p
	}
	unreadSandbox := with(func(p *runtimeProfile) {
		p.sandboxImage, p.unread, p.why = "", []string{"sandbox image"}, "sandbox image: deadline exceeded"
	})
	for _, tc := range []struct {
		name     string
		was, now runtimeProfile
		want     []string // what each change names
	}{
		{"same", base, base, nil},
		{"upgraded", base, with(func(p *runtimeProfile) { p.version = "2.1.4" }), []string{"runtime"}},
		{"replaced", base, with(func(p *runtimeProfile) { p.name = "cri-o" }), []string{"runtime"}},
		{"sandbox image", base, with(func(p *runtimeProfile) { p.sandboxImage = "registry.k8s.io/pause:3.10" }), []string{"sandbox image"}},
		{"sandbox image no longer said", base, with(func(p *runtimeProfile) { p.sandboxImage = "" }), []string{"sandbox image"}},
		{"snapshotter", base, with(func(p *runtimeProfile) {
			p.imageFs = "/var/lib/containerd/io.containerd.snapshotter.v1.native"
		}), []string{"image filesystem"}},
		{"read now", unreadSandbox, base, []string{"sandbox image", "unread"}},
		{"unreadable now", base, unreadSandbox, []string{"sandbox image", "unread"}},
		{"still unreadable, other error", unreadSandbox, with(func(p *runtimeProfile) {
			*p = unreadSandbox
			p.why = "sandbox image: connection refused"
		}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.was.changes(tc.now)
			var named []string
			for _, c := range got {
				what, _, _ := strings.Cut(c, ":")
				named = append(named, what)
			}
			if !slices.Equal(named, tc.want) {
				t.Errorf("changes = %q, want changes of %q", got, tc.want)
			}
		})
	}
}
