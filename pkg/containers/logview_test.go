package containers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// TestPodLogsUnseen: the pod logs count as unseen as soon as the log of
// one running container is missing under the pod logs directory, where the
// kubelet lays it out and at the log path the runtime reports, or the
// runtime cannot say where it is; a log that is there proves nothing (it
// may be a copy from before a mount), a log path outside the directory
// makes them unseen too (nodegc could not remove its files), one unknown
// tells nothing, nor does a container the runtime no longer
// runs. The runtime is asked
// only when the log is not where the kubelet lays it out, for up to
// logViewSamples containers.
func TestPodLogsUnseen(t *testing.T) {
	const uid = "0a000000-0000-4000-8000-00000000000a"
	running := with(ctr("p", "app", 2, StateRunning, time.Hour), func(c *Container) { c.ID, c.PodUID = "run", uid })
	var many []Container
	for i := range logViewSamples + 5 {
		many = append(many, with(running, func(c *Container) { c.ID, c.Attempt = fmt.Sprint("run", i), uint32(100+i) }))
	}
	for _, tc := range []struct {
		name string
		// logPath is the running containers' log path, relative to
		// the pod logs directory unless absolute; files exist there.
		logPath    string
		files      []string
		containers []Container
		// runtime changes the runtime after the containers were added.
		runtime func(*fakeRuntime)
		unseen  bool
		// why is in what podLogsUnseen says; "": logPath.
		why   string
		asked int // how many times the runtime was asked for the log path
	}{
		{name: "no running container", containers: []Container{dead("p", "app", 1, time.Hour)}},
		{name: "unmanaged running container", logPath: "x/0.log",
			containers: []Container{with(running, func(c *Container) { c.Managed = false })}},
		{name: "log where the kubelet lays it out", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/2.log"},
			containers: []Container{running}},
		{name: "log seen at the runtime's path", logPath: "elsewhere/app.log", files: []string{"elsewhere/app.log"},
			containers: []Container{running}, asked: 1},
		// Before, it told nothing: nodegc removed containers whose
		// log files it could not remove, which stayed behind.
		{name: "log path outside the pod logs directory", logPath: "/var/lib/other/app.log",
			containers: []Container{running}, unseen: true, asked: 1},
		// A kubelet podLogsDir moved: the pods started before the move
		// log in the old one until they restart; the new ones are seen.
		{name: "log path outside, another log seen where the kubelet lays it out", logPath: "/var/lib/other/app.log",
			files: []string{"ns_q_" + uid[:35] + "b/app/0.log"}, asked: 1,
			containers: []Container{running, with(running, func(c *Container) { c.ID, c.PodName, c.PodUID, c.Attempt = "run2", "q", uid[:35]+"b", 0 })}},
		{name: "no log path", containers: []Container{running}, asked: 1},
		{name: "log rotating: only its rotated sibling", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/2.log.20261130-021500"},
			containers: []Container{running}},
		{name: "another attempt's log only", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/20.log"},
			containers: []Container{running}, unseen: true, asked: 1},
		{name: "log not seen", logPath: "ns_p_" + uid + "/app/2.log",
			containers: []Container{running}, unseen: true, asked: 1},
		// Before, one log seen settled it: a copy of the logs made
		// before a mount over the directory counted as seen.
		{name: "one of two seen", unseen: true, asked: 1, logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_q_" + uid[:35] + "b/app/0.log"},
			containers: []Container{running, with(running, func(c *Container) { c.ID, c.PodName, c.PodUID, c.Attempt = "run2", "q", uid[:35]+"b", 0 })}},
		{name: "removed meanwhile", logPath: "ns_p_" + uid + "/app/2.log", containers: []Container{running},
			runtime: func(rt *fakeRuntime) { delete(rt.containers, "run") }, asked: 1},
		{name: "exited meanwhile", logPath: "ns_p_" + uid + "/app/2.log", containers: []Container{running},
			runtime: func(rt *fakeRuntime) { rt.setState("run", runtimeapi.ContainerState_CONTAINER_EXITED) }, asked: 1},
		// Before, a failed status read was skipped: the logs counted
		// as seen if every read failed.
		{name: "runtime cannot be asked", logPath: "ns_p_" + uid + "/app/2.log", containers: []Container{running},
			runtime: func(rt *fakeRuntime) {
				rt.fail["ContainerStatus run"] = status.Error(codes.Unavailable, "connection refused")
			},
			unseen: true, why: "the log path of running container run cannot be read", asked: 1},
		{name: "runtime asked for a few at most", logPath: "ns_p_" + uid + "/app/9.log", files: []string{"ns_p_" + uid + "/app/9.log"},
			containers: many, asked: logViewSamples},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podLogs := filepath.Join(t.TempDir(), "pods")
			mkdirs(t, podLogs)
			for _, f := range tc.files {
				mkdirs(t, filepath.Dir(filepath.Join(podLogs, f)))
				touch(t, filepath.Join(podLogs, f))
			}
			rt := newFakeRuntime()
			logPath := tc.logPath
			if logPath != "" && !filepath.IsAbs(logPath) {
				logPath = filepath.Join(podLogs, logPath)
			}
			for _, c := range tc.containers {
				rt.addContainer(c, logPath)
			}
			if tc.runtime != nil {
				tc.runtime(rt)
			}
			unseen, why := podLogsUnseen(t.Context(), rt, tc.containers, podLogs)
			want := tc.why
			if want == "" && tc.unseen {
				want = logPath
			}
			if unseen != tc.unseen || unseen != (why != "") || !strings.Contains(why, want) {
				t.Errorf("podLogsUnseen = %t, %q; want %t (%q)", unseen, why, tc.unseen, want)
			}
			asked := 0
			for _, c := range rt.callLog() {
				if strings.HasPrefix(c, "ContainerStatus ") {
					asked++
				}
			}
			if asked != tc.asked {
				t.Errorf("the runtime was asked for a log path %d times, want %d (calls %v)", asked, tc.asked, rt.callLog())
			}
		})
	}
}

// TestStaleCopyOfPodLogsIsUnseen: the operator moved the pod logs to a new
// disk the usual way, copy then mount (rsync -a /var/log/pods/ /mnt/new/ &&
// mount --bind /mnt/new /var/log/pods), 30 minutes ago. nodegc's hostPath
// mount (no propagation) still shows the old directory, with the copied
// files: the log of a container that runs since before the move (pod q's
// db/0) is there, frozen; every log written since is on the new disk only,
// running app/3's of live pod p too. Before, the one stale log counted as
// proof that nodegc's view was the kubelet's: the link of p's newest dead
// instance (app/2, exited 10 minutes ago, whose log exists on the host)
// went as dangling, and app/1 went by the per-container limit while its
// log files stayed on the new disk. Now the missing log of app/3 makes the
// pod logs unseen, and the plan keeps them.
func TestStaleCopyOfPodLogsIsUnseen(t *testing.T) {
	f := livePodsFixture(t) // p/app/0..2 become instances made after the move

	pLogs := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"), "app")
	qLogs := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("q"), "db")
	mkdirs(t, pLogs, qLogs, f.cfg.ContainerLogsDirectory)
	// q's db/0 runs since before the move: its copy is in nodegc's view.
	touch(t, filepath.Join(qLogs, "0.log"))
	f.addSandbox(sbx("q", 0, true, 5*time.Hour))
	db := with(ctr("q", "db", 0, StateRunning, 5*time.Hour), func(c *Container) { c.ID, c.PodUID = "bbbbbbbbbbbb0", fixtureUID("q") })
	f.rt.addContainer(db, filepath.Join(qLogs, "0.log"))

	// p: app/0..2 exited after the move, app/3 runs; none of their logs is
	// in nodegc's view.
	for attempt, id := range []string{"aaaaaaaaaaaa0", "aaaaaaaaaaaa1", "aaaaaaaaaaaa2", "aaaaaaaaaaaa3"} {
		f.addLinkedInstance(t, pLogs, uint32(attempt), id, attempt == 3, time.Duration(25-5*attempt)*time.Minute)
	}

	r, err := f.manager(t, nil).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !r.PodLogsUnseen {
		t.Error("the plan does not say that the pod logs are unseen, though nodegc does not see running app/3's log")
	}
	for _, d := range r.RemoveLogLinks {
		t.Errorf("link %s removed as %s, though nodegc's view of the pod logs is a frozen copy", d.Link.Name, d.Reason)
	}
	for _, d := range r.RemoveContainers {
		t.Errorf("container %s removed as %s, though its log files, on the disk nodegc cannot see, would stay until pod p is deleted", d.Container.ID, d.Reason)
	}
}

// addLinkedInstance adds pod p's container app of that attempt and ID,
// running or exited, created age ago, its log at logs/<attempt>.log, and
// its link in the container logs directory.
func (f *managerFixture) addLinkedInstance(t *testing.T, logs string, attempt uint32, id string, running bool, age time.Duration) {
	t.Helper()
	state := StateExited
	if running {
		state = StateRunning
	}
	c := with(ctr("p", "app", attempt, state, age), func(c *Container) { c.ID, c.PodUID = id, fixtureUID("p") })
	log := filepath.Join(logs, fmt.Sprint(attempt)+".log")
	f.rt.addContainer(c, log)
	if err := os.Symlink(log, filepath.Join(f.cfg.ContainerLogsDirectory, legacyLinkName("p", "ns", "app", id))); err != nil {
		t.Fatal(err)
	}
}

// livePodsFixture is the manager fixture without its containers and
// without pod gone (its sandbox and log directory), the view listing the
// live pods p and q: a test adds the containers it needs.
func livePodsFixture(t *testing.T) *managerFixture {
	t.Helper()
	f := newManagerFixture(t)
	f.rt.mu.Lock()
	for id := range f.rt.containers {
		delete(f.rt.containers, id)
		delete(f.rt.sandboxIDs, id)
	}
	delete(f.rt.sandboxes, "gone/sb0")
	f.rt.mu.Unlock()
	if err := os.RemoveAll(filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("gone"))); err != nil {
		t.Fatal(err)
	}
	f.pods.view = live(fixtureUID("p"), fixtureUID("q"))
	return f
}

// podLoggingIn gives f's runtime live pod p, whose container app
// restarted three times (app/0 to app/2 exited, app/3 runs), each logging
// under podLogs, a pod logs directory other than f's; it returns the
// directory of app's logs there.
func podLoggingIn(t *testing.T, f *managerFixture, podLogs string) string {
	t.Helper()
	logs := filepath.Join(podLogs, fixtureLogDir("p"), "app")
	for a := range 4 {
		state := StateExited
		if a == 3 {
			state = StateRunning
		}
		logPath := filepath.Join(logs, fmt.Sprintf("%d.log", a))
		touch(t, logPath)
		f.rt.addContainer(with(ctr("p", "app", uint32(a), state, time.Duration(4-a)*time.Hour), func(c *Container) {
			c.PodUID = fixtureUID("p")
		}), logPath)
	}
	f.addSandbox(sbx("p", 0, true, 5*time.Hour))
	return logs
}

// skipsOf lists the removals out skipped, each as "ID WHY".
func skipsOf(out *Outcome) []string {
	var skipped []string
	for _, s := range out.Skipped {
		skipped = append(skipped, s.ID+" "+s.Why)
	}
	return skipped
}

// TestLogsElsewhereKeepLivePodsContainers: the kubelet writes the pod logs
// under a podLogsDir nodegc was not told (/data/pods), or
// podLogsDirectory names the target of the /var/log/pods link the kubelet
// writes through: every log path the runtime reports lies outside
// podLogsDirectory, where nodegc can remove no log file. Before, it still
// removed live pods' dead containers by the per-container limit, with
// success and 0 log bytes, and their log files stayed until their pod was
// deleted (the kubelet no longer knew the containers), with nothing said.
// Now the logs count as unseen, naming the path and the fix, and those
// containers are kept (logs_unseen).
func TestLogsElsewhereKeepLivePodsContainers(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	kubeletLogs := podLoggingIn(t, f, filepath.Join(t.TempDir(), "data", "pods")) // the kubelet's podLogsDir
	m := f.manager(t, nil)
	r, err := m.GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Plan.PodLogsUnseen || len(r.Outcome.Containers) > 0 {
		t.Errorf("logs outside podLogsDirectory: unseen %t, removed %v; want unseen, nothing removed", r.Plan.PodLogsUnseen, planIDs(r.Plan))
	}
	kept := 0
	for _, d := range r.Plan.KeepContainers {
		if d.Reason == KeepLogsUnseen {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("%d containers kept as %s; want 2 (app/0 and app/1, over the per-container limit)", kept, KeepLogsUnseen)
	}
	for a := range 3 {
		if !exists(filepath.Join(kubeletLogs, fmt.Sprintf("%d.log", a))) {
			t.Errorf("log %d.log removed", a)
		}
	}
}

// TestPodLogsDirMovedNewPodsKeepTheirContainers: the kubelet's podLogsDir
// was moved (to /data/pods) and nodegc was not told. A container started
// before the move still runs and logs in the old directory, which nodegc
// sees, so the logs count as seen for the whole node. A live pod started
// after the move logs in the new one, where nodegc can remove no log file:
// before, its dead instances went by the per-container limit, with success
// and 0 log bytes, and their log files stayed until the pod was deleted,
// with nothing said (review containers r9 #1). Now the check before each
// removal of a live pod's container skips one whose log the runtime writes
// outside podLogsDirectory (logs_elsewhere), and the kubelet's own GC,
// which reaches those files, removes it with them; a gone pod's container
// still goes.
func TestPodLogsDirMovedNewPodsKeepTheirContainers(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	f.pods.view = live(fixtureUID("p"), fixtureUID("q"))
	// q: running since before the move, its log where nodegc looks.
	qLog := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("q"), "db", "0.log")
	touch(t, qLog)
	f.rt.addContainer(with(ctr("q", "db", 0, StateRunning, 30*24*time.Hour), func(c *Container) { c.PodUID = fixtureUID("q") }), qLog)
	f.addSandbox(sbx("q", 0, true, 30*24*time.Hour))
	// p: started after the move, its logs in the kubelet's new podLogsDir.
	newLogs := podLoggingIn(t, f, filepath.Join(t.TempDir(), "data", "pods"))
	m := f.manager(t, nil)
	var logs strings.Builder
	ctx := klog.NewContext(t.Context(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	r, err := m.GarbageCollect(ctx, TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if r.Plan.PodLogsUnseen {
		t.Error("the logs count as unseen; want seen (q's log is there)")
	}
	skipped := skipsOf(r.Outcome)
	for _, d := range r.Outcome.Containers {
		if d.Container.PodUID == fixtureUID("p") {
			t.Errorf("%s (app/%d of live pod p) removed by %s; its log stays outside podLogsDirectory", d.Container.ID, d.Container.Attempt, d.Reason)
		}
	}
	want := []string{"p/app/0 " + SkipLogsElsewhere, "p/app/1 " + SkipLogsElsewhere}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(m.metrics.skipped.WithLabelValues(SkipLogsElsewhere)); got != 2 {
		t.Errorf("nodegc_container_gc_removals_skipped_total{why=logs_elsewhere} = %v, want 2", got)
	}
	for a := range 4 {
		if !exists(filepath.Join(newLogs, fmt.Sprintf("%d.log", a))) {
			t.Errorf("log %d.log removed", a)
		}
	}
	// The next run skips them again, and says nothing new.
	if _, err := m.GarbageCollect(ctx, TriggerManual); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "log outside the pod logs directory"); n != 1 {
		t.Errorf("the skips logged %d times over two runs, want once:\n%s", n, logs.String())
	}
}

// TestPodLogsDirectoryNamesTheLinkTarget: /var/log/pods is a link to
// /data/pods, which the kubelet writes through, and podLogsDirectory names
// the target. The logs are there, but the runtime reports their paths
// through the link, outside podLogsDirectory: nodegc could remove none of
// a live pod's containers' log files by those paths. Before, it removed
// their dead instances by the limits and left the files (0 log bytes); now
// they are skipped as logs_elsewhere, and left to the kubelet's GC.
func TestPodLogsDirectoryNamesTheLinkTarget(t *testing.T) {
	f := newManagerFixture(t)
	f.rt = newFakeRuntime()
	f.pods.view = live(fixtureUID("p"))
	link := filepath.Join(t.TempDir(), "var-log-pods")
	if err := os.Symlink(f.cfg.PodLogsDirectory, link); err != nil {
		t.Fatal(err)
	}
	podLoggingIn(t, f, link)
	r, err := f.manager(t, nil).GarbageCollect(t.Context(), TriggerManual)
	if err != nil {
		t.Fatal(err)
	}
	if r.Plan.PodLogsUnseen {
		t.Error("the logs count as unseen; want seen (they are under podLogsDirectory, through the link)")
	}
	skipped := skipsOf(r.Outcome)
	if diff := cmp.Diff([]string{"p/app/0 " + SkipLogsElsewhere, "p/app/1 " + SkipLogsElsewhere}, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	for a := range 3 {
		if p := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"), "app", fmt.Sprintf("%d.log", a)); !exists(p) {
			t.Errorf("%s removed", p)
		}
	}
}
