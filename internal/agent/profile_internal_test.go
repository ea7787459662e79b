package agent

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/pkg/cri"
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

// TestProfileReadAgainWhileUnread: a profile built without a fact (the
// runtime's status timed out when the loops were built) is read again every
// retry until the fact can be read, and the GC is built again then: a
// runtime does not have to restart for nodegc to learn its sandbox image. A
// profile read whole is read again only when the connection returns.
func TestProfileReadAgainWhileUnread(t *testing.T) {
	full := runtimeProfile{name: "containerd", version: "1.7.27", sandboxImage: "registry.k8s.io/pause:3.10", imageFs: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"}
	unread := full
	unread.sandboxImage, unread.unread, unread.why = "", []string{"sandbox image"}, "sandbox image: deadline exceeded"
	noRefresh := func(context.Context) error { return nil }

	reads := 0
	read := func(context.Context) runtimeProfile {
		reads++
		if reads < 3 {
			return unread
		}
		return full
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !profileChanged(ctx, unread, make(chan struct{}), time.Millisecond, noRefresh, read, noConfirm) {
		t.Fatalf("built without the sandbox image: no rebuild once it could be read (%d reads)", reads)
	}
	if reads != 3 {
		t.Errorf("reads until the sandbox image could be read: %d, want 3", reads)
	}

	reads = 0
	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if profileChanged(ctx, full, make(chan struct{}), time.Millisecond, noRefresh, read, noConfirm) || reads != 0 {
		t.Errorf("a profile read whole, no reconnection: rebuilt or read (%d reads)", reads)
	}

	// At a reconnection a whole profile is read again.
	reconnected := make(chan struct{}, 1)
	reconnected <- struct{}{}
	other := full
	other.sandboxImage = "registry.k8s.io/pause:3.11"
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !profileChanged(ctx, full, reconnected, time.Hour, noRefresh, func(context.Context) runtimeProfile { return other }, noConfirm) {
		t.Error("another sandbox image after a reconnection: no rebuild")
	}
}

// TestRefreshFailureLoggedOnce: a runtime that comes back on its socket
// but does not answer CRI Version (a containerd with its cri plugin off in
// place of the one that was there, one still starting) is asked again until
// it answers; its first failure is logged, with what to do when the socket
// serves no CRI v1, and the answer after it, not each of the retries.
// Before, the retries were silent: nothing in the log said why node GC
// held its removals (review node r9 #1).
func TestRefreshFailureLoggedOnce(t *testing.T) {
	was := runtimeProfile{name: "containerd", version: "1.7.27", sandboxImage: "registry.k8s.io/pause:3.10"}
	noCRI := grpcstatus.Error(codes.Unimplemented, "unknown service runtime.v1.RuntimeService")
	refreshes := 0
	refresh := func(context.Context) error {
		if refreshes++; refreshes <= 3 {
			return noCRI
		}
		return nil
	}
	reconnected := make(chan struct{}, 1)
	reconnected <- struct{}{}
	ctx, lines := logLines(t.Context())
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if profileChanged(ctx, was, reconnected, time.Hour, refresh, func(context.Context) runtimeProfile { return was },
		func(uint64) { cancel() }) {
		t.Error("an unchanged profile after a reconnection: rebuilt")
	}
	if refreshes != 4 {
		t.Errorf("Version asked %d times, want 4 (until it answered)", refreshes)
	}
	var failed, answered []string
	for _, l := range lines() {
		switch {
		case strings.Contains(l, "does not answer CRI Version"):
			failed = append(failed, l)
		case strings.Contains(l, "answers CRI Version again"):
			answered = append(answered, l)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "unknown service runtime.v1.RuntimeService") ||
		!strings.Contains(failed[0], "this socket serves no CRI v1 RuntimeService") {
		t.Errorf("failures logged: %q; want one, with the error and the hint", failed)
	}
	if len(answered) != 1 || !strings.Contains(answered[0], `"failures"=3`) {
		t.Errorf("answers logged: %q; want one, after 3 failures", answered)
	}
}

// noConfirm is profileChanged's confirm where the test does not look.
func noConfirm(uint64) {}

// TestProfileConfirmedOnItsConnection: at a return of the connection, a
// profile read again that did not change is confirmed with the generation
// of the connection it was read on, so that the image GC, which removes
// nothing after a loss until then, goes on; one that changed is not (the
// GC is built again).
func TestProfileConfirmedOnItsConnection(t *testing.T) {
	was := runtimeProfile{name: "containerd", version: "1.7.27", sandboxImage: "registry.k8s.io/pause:3.10", generation: 0}
	noRefresh := func(context.Context) error { return nil }
	reconnected := make(chan struct{}, 1)
	reconnected <- struct{}{}
	confirmed := make(chan uint64, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case g := <-confirmed:
			if g != 3 {
				t.Errorf("confirmed generation %d, want 3 (the one the profile was read on)", g)
			}
		case <-ctx.Done():
			t.Error("an unchanged profile after a reconnection was not confirmed")
		}
		cancel()
	}()
	same := func(context.Context) runtimeProfile { p := was; p.generation = 3; return p }
	if profileChanged(ctx, was, reconnected, time.Hour, noRefresh, same, func(g uint64) { confirmed <- g }) {
		t.Error("an unchanged profile after a reconnection: rebuilt")
	}

	reconnected <- struct{}{}
	other := func(context.Context) runtimeProfile {
		p := was
		p.sandboxImage, p.generation = "registry.k8s.io/pause:3.11", 4
		return p
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !profileChanged(ctx, was, reconnected, time.Hour, noRefresh, other, func(g uint64) { t.Errorf("a changed profile confirmed (generation %d)", g) }) {
		t.Error("another sandbox image after a reconnection: no rebuild")
	}
}

// TestSandboxImageUnreadWhereReported: the image GC holds its removals
// when the runtime's sandbox image could not be read on a runtime that
// reports one (containerd 1.x, or a containerd version not understood),
// not on one that reports none, nor when it was read.
func TestSandboxImageUnreadWhereReported(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		unread        []string
		want          bool
	}{
		{"containerd", "v1.7.27", []string{factSandboxImage}, true},
		{"containerd", "1.6.20~ds1", []string{factSandboxImage, factImageFs}, true},
		{"containerd", "devel", []string{factSandboxImage}, true},
		{"containerd", "v2.1.4", []string{factSandboxImage}, false},
		{"containerd", "v1.7.27", []string{factContainerdAPI}, false},
		{"containerd", "v1.7.27", nil, false},
		{"cri-o", "1.31.0", []string{factSandboxImage}, false},
	} {
		p := runtimeProfile{name: tc.name, version: tc.version, unread: tc.unread}
		if got := p.sandboxImageUnread(); got != tc.want {
			t.Errorf("%s %s, unread %q: sandboxImageUnread = %v, want %v", tc.name, tc.version, tc.unread, got, tc.want)
		}
	}
}

// TestContainerdAPIUnreadAtBuild: containerd's own API did not answer when
// the image GC was built (it gives the images of the pod sandboxes, among
// others), though the profile read just before found it. The profile then
// counts it unread, once however often told, so that it is read again
// every retry and the GC built again once the API answers; as long as it
// does not, the GC is not built again. The order the facts were found
// unread in is no change.
func TestContainerdAPIUnreadAtBuild(t *testing.T) {
	full := runtimeProfile{name: "containerd", version: "2.1.4", imageFs: "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"}
	built := full
	built.apiUnread(errors.New("deadline exceeded"))
	built.apiUnread(errors.New("deadline exceeded"))
	if !slices.Equal(built.unread, []string{factContainerdAPI}) || built.why != "containerd API: deadline exceeded" {
		t.Fatalf("after two failed dials: unread %q, why %q; want the API once", built.unread, built.why)
	}
	noRefresh := func(context.Context) error { return nil }
	stillDown := full
	stillDown.unread, stillDown.why = []string{factContainerdAPI}, "containerd API: connection refused"
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	reads := 0
	if profileChanged(ctx, built, make(chan struct{}), time.Millisecond, noRefresh, func(context.Context) runtimeProfile { reads++; return stillDown }, noConfirm) {
		t.Error("the API still does not answer: the GC was built again")
	}
	if reads < 2 {
		t.Errorf("the API was asked %d times in 100ms with a 1ms retry, want it asked again and again", reads)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !profileChanged(ctx, built, make(chan struct{}), time.Millisecond, noRefresh, func(context.Context) runtimeProfile { return full }, noConfirm) {
		t.Error("the API answers now: no rebuild")
	}

	twoUnread := full
	twoUnread.unread = []string{factSandboxImage, factContainerdAPI}
	reordered := full
	reordered.unread = []string{factContainerdAPI, factSandboxImage}
	if got := twoUnread.changes(reordered); got != nil {
		t.Errorf("the same facts unread in another order: changes %q, want none", got)
	}
}

// TestProfileAsksContainerdAPI, on a real containerd: the profile says
// whether containerd's own API answers on the socket given; a socket where
// nothing listens makes it unread, with the reason.
func TestProfileAsksContainerdAPI(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2})
	c, err := cri.Dial(t.Context(), cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := readRuntimeProfile(t.Context(), c, n.Socket, 5*time.Second); slices.Contains(p.unread, factContainerdAPI) {
		t.Errorf("containerd's socket: unread %q (%s), want its API read", p.unread, p.why)
	}
	nowhere := filepath.Join(t.TempDir(), "nothing.sock")
	p := readRuntimeProfile(t.Context(), c, nowhere, 2*time.Second)
	if !slices.Contains(p.unread, factContainerdAPI) || !strings.Contains(p.why, factContainerdAPI+": ") {
		t.Errorf("a socket where nothing listens: unread %q, why %q; want the containerd API unread, and why", p.unread, p.why)
	}
}
