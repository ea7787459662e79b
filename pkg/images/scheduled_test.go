package images

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// fakePods is a pod source whose answer the test sets.
type fakePods struct{ view PodImages }

func (f *fakePods) PodImages() PodImages { return f.view }

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB     = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// scheduledImages returns, for each image, its ScheduledBy ("" when not
// scheduled).
func scheduledImages(m *Manager, in []Image, now time.Time) map[string]string {
	m.clock = clocktesting.NewFakeClock(now)
	if _, err := m.markScheduled(context.Background(), in, shortNames{}); err != nil {
		panic(err)
	}
	out := map[string]string{}
	for _, img := range in {
		if img.Scheduled != (img.ScheduledBy != "") {
			panic("Scheduled and ScheduledBy disagree")
		}
		out[img.ID] = img.ScheduledBy
	}
	return out
}

// nodeImages are images as containerd's CRI lists them: fully qualified
// tags and digests.
func nodeImages() []Image {
	return []Image{
		{ID: "sha256:01", RepoTags: []string{"docker.io/library/nginx:latest"}, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:02", RepoTags: []string{"docker.io/library/nginx:1.27"}, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:03", RepoDigests: []string{"quay.io/team/app@" + digestA}, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:04", RepoTags: []string{"127.0.0.1:5000/e2e/init:v1"}, FirstDetected: t0.Add(-time.Hour)},
		{ID: idB, RepoTags: []string{"registry.k8s.io/other:v1"}, FirstDetected: t0.Add(-time.Hour)},
		{ID: "sha256:06", RepoTags: []string{"docker.io/team/late:v1"}, FirstDetected: t0.Add(time.Minute)},
	}
}

// TestScheduledMatchesReferencesAsWritten: pod spec references in familiar
// and qualified forms, digests, and the image IDs of statuses.
func TestScheduledMatchesReferencesAsWritten(t *testing.T) {
	pods := &fakePods{view: PodImages{Authoritative: true, Refs: map[string]string{
		"nginx":                          "web/front", // nginx:latest, not nginx:1.27
		"quay.io/team/app:v2@" + digestA: "web/app",   // tag and digest: the digest is what was pulled
		"127.0.0.1:5000/e2e/init:v1":     "jobs/slow",
		"docker-pullable://registry.k8s.io/x@" + digestA[:7] + "bad": "jobs/bad", // does not parse: matches nothing
		idB: "jobs/ran", // a status imageID
	}}}
	m := &Manager{opts: Options{Pods: pods}, scheduled: &PodsMemory{}}
	got := scheduledImages(m, nodeImages(), t0)
	want := map[string]string{
		"sha256:01": "pod web/front", "sha256:02": "", "sha256:03": "pod web/app", "sha256:04": "pod jobs/slow",
		idB: "pod jobs/ran", "sha256:06": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scheduled (-want +got):\n%s", diff)
	}
}

// TestScheduledOnARuntimeOfBareIDs: CRI-O lists image IDs as their
// hexadecimal digits alone; a pod status's imageID in the sha256: form,
// or bare, names the image all the same.
func TestScheduledOnARuntimeOfBareIDs(t *testing.T) {
	bare := strings.TrimPrefix(idB, "sha256:")
	for _, ref := range []string{idB, bare} {
		pods := &fakePods{view: PodImages{Authoritative: true, Refs: map[string]string{ref: "jobs/ran"}}}
		m := &Manager{opts: Options{Pods: pods}, scheduled: &PodsMemory{}}
		got := scheduledImages(m, []Image{{ID: bare, FirstDetected: t0.Add(-time.Hour)}}, t0)
		if got[bare] != "pod jobs/ran" {
			t.Errorf("status imageID %q, image listed as %q: scheduled by %q, want pod jobs/ran", ref, bare, got[bare])
		}
	}
}

// TestScheduledProtectsMoreWithoutAuthority: a view that cannot be trusted
// never protects less than the last one that could, plus whatever arrived
// since; before any, every image.
func TestScheduledProtectsMoreWithoutAuthority(t *testing.T) {
	pods := &fakePods{view: PodImages{Reason: "not_synced"}}
	m := &Manager{opts: Options{Pods: pods}, scheduled: &PodsMemory{}}

	got := scheduledImages(m, nodeImages(), t0)
	for id, by := range got {
		if by == "" {
			t.Errorf("never authoritative: %s not kept", id)
		}
	}

	// Authoritative at t0: only the pods' images.
	pods.view = PodImages{Authoritative: true, Refs: map[string]string{"nginx:latest": "web/front"}}
	got = scheduledImages(m, nodeImages(), t0)
	want := map[string]string{"sha256:01": "pod web/front", "sha256:02": "", "sha256:03": "", "sha256:04": "", idB: "", "sha256:06": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("authoritative (-want +got):\n%s", diff)
	}

	// The API is lost and the source's cache was emptied (or never had
	// the pod): the last authoritative refs stay, and sha256:06, first
	// seen after t0, is kept too.
	pods.view = PodImages{Reason: "unreachable"}
	got = scheduledImages(m, nodeImages(), t0.Add(5*time.Minute))
	want["sha256:06"] = "pod view not authoritative (unreachable): arrived since it last was"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unreachable (-want +got):\n%s", diff)
	}
	// An image whose runtime arrival is after t0 though nodegc dated it
	// earlier (removed and pulled again) is kept too.
	in := nodeImages()
	in[1].Arrived = t0.Add(time.Second)
	if got := scheduledImages(m, in, t0.Add(5*time.Minute)); got["sha256:02"] == "" {
		t.Error("an image that arrived again since the view was lost is not kept")
	}
}

// TestPodsMemoryOutlivesTheManager: a manager built again (for a runtime
// upgraded in place) while the pod view is not authoritative goes on from
// what the one before it saw, given its memory: it keeps the last known
// pods' images and what arrived since, not every image.
func TestPodsMemoryOutlivesTheManager(t *testing.T) {
	pods := &fakePods{view: PodImages{Authoritative: true, Refs: map[string]string{"nginx:latest": "web/front"}}}
	memory := &PodsMemory{}
	manager := func() *Manager {
		m, err := NewManager(Options{Config: policyConfig(), StateDirectory: t.TempDir(), Runtime: fsOnlyRuntime{mountpoint: t.TempDir()},
			Disk: diskstats.NewReader(), Pods: pods, PodsMemory: memory, PlanOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	scheduledImages(manager(), nodeImages(), t0)

	pods.view = PodImages{Reason: "unreachable"}
	got := scheduledImages(manager(), nodeImages(), t0.Add(5*time.Minute))
	want := map[string]string{"sha256:01": "pod web/front", "sha256:02": "", "sha256:03": "", "sha256:04": "", idB: "",
		"sha256:06": "pod view not authoritative (unreachable): arrived since it last was"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a manager built again, the view unreachable (-want +got):\n%s", diff)
	}
}

// TestPodsMemoryFollowsAStepBetweenManagers: the wall clock is stepped
// back an hour between one manager's last save and the start of the next
// (a runtime upgraded in place, the agent running on). The next manager
// moves its records by the step, read off the boot clock (stepWhileDown),
// and when the pod view was last authoritative with them, as a manager
// does for a step it finds while it runs (TestPodViewLapseAcrossAClockStep).
func TestPodsMemoryFollowsAStepBetweenManagers(t *testing.T) {
	// The boot clock is faked (bootClock): the machine has been up an
	// hour, whenever this runs and whatever its real uptime.
	const up = time.Hour
	dir := t.TempDir()
	now := time.Now().Round(0)
	// Saved a minute ago by the boot clock, 59m after now by the wall
	// clock of then; the view was last authoritative a minute before.
	saved := now.Add(59 * time.Minute)
	if err := saveState(dir, "", map[string]Usage{}, saved, saved, bootReading{"b1", up - time.Minute}); err != nil {
		t.Fatal(err)
	}
	memory := &PodsMemory{lastAuthoritative: saved.Add(-time.Minute)}
	_, err := NewManager(Options{Config: policyConfig(), StateDirectory: dir, BootID: "b1", Runtime: fsOnlyRuntime{mountpoint: t.TempDir()},
		Disk: diskstats.NewReader(), Pods: &fakePods{}, PodsMemory: memory, bootClock: func() (time.Duration, bool) { return up, true }})
	if err != nil {
		t.Fatal(err)
	}
	want := now.Add(-2 * time.Minute)
	if got := memory.lastAuthoritative; got.Sub(want).Abs() > time.Second {
		t.Errorf("the view last authoritative %v ago, want 2m ago (moved by %v)", now.Sub(got), got.Sub(saved.Add(-time.Minute)))
	}
}

// readingPods is a pod source that calls reading as it gives its view.
type readingPods struct {
	view    PodImages
	reading func()
}

func (p readingPods) PodImages() PodImages {
	p.reading()
	return p.view
}

// TestStepBackWhileTheViewIsRead: a step back applied while the pod view
// is read, after the clock was, moves that reading too: it is when the
// view was last authoritative, and images first seen after the step would
// count as older.
func TestStepBackWhileTheViewIsRead(t *testing.T) {
	m := &Manager{scheduled: &PodsMemory{}}
	m.opts.Pods = readingPods{view: PodImages{Authoritative: true}, reading: func() { m.scheduled.steppedBack(-time.Hour) }}
	scheduledImages(m, nil, t0)
	if got, want := m.scheduled.lastAuthoritative, t0.Add(-time.Hour); !got.Equal(want) {
		t.Errorf("the view last authoritative at %v, want %v", got, want)
	}
}

// TestScheduledOffWithoutSource: node-only, the rule is off and the plan
// says nothing about pods.
func TestScheduledOffWithoutSource(t *testing.T) {
	m := &Manager{scheduled: &PodsMemory{}}
	for id, by := range scheduledImages(m, nodeImages(), t0) {
		if by != "" {
			t.Errorf("%s kept as %q without a pod source", id, by)
		}
	}
}

// TestScheduledKeepRule: the keep rule's place among the others.
func TestScheduledKeepRule(t *testing.T) {
	p := policyFor(t, nil)
	in := []Image{
		with(img("sched", 10, time.Hour, time.Hour), func(i *Image) { i.Scheduled = true }),
		with(img("both", 10, time.Hour, time.Hour), func(i *Image) { i.Scheduled, i.InUse = true, true }),
		img("free", 10, time.Hour, time.Hour),
	}
	plan, err := p.Plan(in, DiskStats{Capacity: 100 * mib, Available: 0}, t0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range append(plan.Keep, plan.Remove...) {
		got[d.Image.ID] = d.Reason
	}
	want := map[string]string{"sched": KeepScheduled, "both": KeepInUse, "free": ReasonSpace}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
}

// TestScheduledShortNameUnderAnyRegistry: CRI-O resolves a short name
// (no registry) through its registries.conf and lists the image under the
// registry that served it; the kubelet passes the spec's name as written.
// The image of a pod bound to the node whose spec says ubi8/ubi-minimal,
// listed as registry.access.redhat.com/ubi8/ubi-minimal:latest, is
// scheduled; so is nginx's from quay.io. Before, a short name was read as
// Docker Hub's only, and such an image was not protected. A reference with
// a registry still names that registry's image only, and a short name
// another tag or path of no image.
func TestScheduledShortNameUnderAnyRegistry(t *testing.T) {
	pods := &fakePods{view: PodImages{Authoritative: true, Refs: map[string]string{
		"ubi8/ubi-minimal":      "web/pending",
		"nginx:1.27":            "web/front",
		"registry.k8s.io/pause": "kube-system/x",
		"team/app@" + digestA:   "jobs/pinned",
	}}}
	m := &Manager{opts: Options{Pods: pods}, scheduled: &PodsMemory{}}
	images := []Image{
		{ID: "sha256:11", RepoTags: []string{"registry.access.redhat.com/ubi8/ubi-minimal:latest"}},
		{ID: "sha256:12", RepoTags: []string{"quay.io/nginx:1.27"}},
		{ID: "sha256:13", RepoTags: []string{"quay.io/nginx:1.26"}},
		{ID: "sha256:14", RepoTags: []string{"quay.io/pause:latest"}},
		{ID: "sha256:15", RepoDigests: []string{"registry.example/team/app@" + digestA}},
		{ID: "sha256:16", RepoTags: []string{"registry.access.redhat.com/ubi9/ubi-minimal:latest"}},
	}
	got := scheduledImages(m, images, t0)
	want := map[string]string{
		"sha256:11": "pod web/pending", "sha256:12": "pod web/front", "sha256:13": "", "sha256:14": "",
		"sha256:15": "pod jobs/pinned", "sha256:16": "",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scheduled (-want +got):\n%s", diff)
	}
}

// aliasRuntime resolves short names as CRI-O does through a registries.conf
// with aliases: ImageStatus of a name in aliases answers the image of the
// name it stands for, of an image ID or a fully qualified name the image
// itself, of a name in fails an error.
type aliasRuntime struct {
	RuntimeService
	images  []*runtimeapi.Image
	aliases map[string]string
	fails   map[string]error
	asked   []string
}

func (r *aliasRuntime) ImageStatus(_ context.Context, ref string) (*runtimeapi.Image, error) {
	r.asked = append(r.asked, ref)
	if err := r.fails[ref]; err != nil {
		return nil, err
	}
	if full, ok := r.aliases[ref]; ok {
		ref = full
	}
	for _, img := range r.images {
		if img.GetId() == ref || slices.Contains(img.GetRepoTags(), ref) {
			return img, nil
		}
	}
	return nil, nil
}

// TestScheduledShortNameResolvedByTheRuntime: CRI-O resolves a pod's short
// name through its registries.conf, whose aliases may change the path
// ("centos" is "quay.io/centos/centos"): the image the runtime resolves the
// name to is scheduled, each name is asked once per plan or run, a runtime
// that cannot be reached fails the marking, and a name the runtime refuses
// is matched by its path only.
func TestScheduledShortNameResolvedByTheRuntime(t *testing.T) {
	rt := &aliasRuntime{
		images: []*runtimeapi.Image{
			{Id: "sha256:21", RepoTags: []string{"quay.io/centos/centos:latest"}},
			{Id: "sha256:22", RepoTags: []string{"quay.io/centos/centos:stream8"}},
			{Id: "sha256:23", RepoTags: []string{"registry.fedoraproject.org/fedora:40"}},
		},
		aliases: map[string]string{"centos": "quay.io/centos/centos:latest", "fedora:40": "registry.fedoraproject.org/fedora:40"},
		fails:   map[string]error{"ambiguous": errors.New("short-name resolution enforced but cannot prompt without a TTY")},
	}
	pods := &fakePods{view: PodImages{Authoritative: true, Refs: map[string]string{
		"centos":                   "web/pending",
		"fedora:40":                "jobs/build",
		"ambiguous":                "jobs/other",
		"quay.io/centos/centos:v9": "web/full", // a registry: not asked
	}}}
	m := &Manager{opts: Options{Pods: pods, Runtime: rt}, scheduled: &PodsMemory{}, clock: clocktesting.NewFakeClock(t0)}
	images := []Image{{ID: "sha256:21", RepoTags: []string{"quay.io/centos/centos:latest"}},
		{ID: "sha256:22", RepoTags: []string{"quay.io/centos/centos:stream8"}},
		{ID: "23", RepoTags: []string{"registry.fedoraproject.org/fedora:40"}}} // CRI-O lists IDs without "sha256:"
	var logs strings.Builder
	ctx := klog.NewContext(t.Context(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	asked := shortNames{}
	for range 2 {
		if _, err := m.markScheduled(ctx, images, asked); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for _, img := range images {
		got[img.ID] = img.ScheduledBy
	}
	want := map[string]string{"sha256:21": "pod web/pending", "sha256:22": "", "23": "pod jobs/build"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scheduled (-want +got):\n%s", diff)
	}
	slices.Sort(rt.asked)
	if diff := cmp.Diff([]string{"ambiguous", "centos", "fedora:40"}, rt.asked); diff != "" {
		t.Errorf("asked the runtime, over two markings sharing what was asked (-want +got):\n%s", diff)
	}
	if n := strings.Count(logs.String(), `reference="ambiguous"`); n != 1 {
		t.Errorf("the name the runtime refuses logged %d times, want once:\n%s", n, logs.String())
	}

	rt.fails["centos"] = status.Error(codes.Unavailable, "connection refused")
	if _, err := m.markScheduled(ctx, images, shortNames{}); !cri.IsUnavailable(err) {
		t.Errorf("marking with the runtime down: err %v, want it unavailable", err)
	}
}

// TestUnresolvedShortNamesForgotten: the short names the runtime refuses
// to resolve are remembered, to be logged once, only while a pod names
// them: on a CI node each job names another (review diff13 #1: every name
// ever refused stayed for the agent's life).
func TestUnresolvedShortNamesForgotten(t *testing.T) {
	rt := &aliasRuntime{fails: map[string]error{}}
	pods := &fakePods{}
	m := &Manager{opts: Options{Pods: pods, Runtime: rt}, scheduled: &PodsMemory{}, clock: clocktesting.NewFakeClock(t0)}
	for i := range 100 {
		name := fmt.Sprintf("ci/build-%d", i)
		rt.fails[name] = errors.New("short-name did not resolve to an alias and no unqualified-search registries are defined")
		pods.view = PodImages{Authoritative: true, Refs: map[string]string{name: "ci/job"}}
		if _, err := m.markScheduled(t.Context(), nil, shortNames{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.scheduled.unresolved); n != 1 {
		t.Errorf("%d short names remembered as unresolved; want 1, the one a pod names", n)
	}
}
