package containers

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mkdirs(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func touch(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		mkdirs(t, filepath.Dir(p))
		if err := os.WriteFile(p, []byte("log\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestScanPodLogDirs: a pod log directory is named NAMESPACE_NAME_UID as the
// kubelet names it: a namespace (a DNS label), a pod name (a DNS subdomain)
// and a UID, which the API server makes a UUID and the kubelet a 32-digit
// hex hash for a static pod. Nothing else under podLogsDirectory counts as
// one (a podLogsDirectory set to /var/log by mistake, a copy made beside a
// pod's directory): it is never removed as a pod's. (Before, any name of
// three non-empty parts did.)
func TestScanPodLogDirs(t *testing.T) {
	root := t.TempDir()
	const apiUID, staticUID = "6f58246d-8219-4c2a-a0ed-86724aaec471", "8f3c2e1d0b9a87654321fedcba987654"
	mkdirs(t, filepath.Join(root, "ns_web_"+apiUID), filepath.Join(root, "kube-system_etcd-n1_"+staticUID), filepath.Join(root, "not-a-pod"),
		filepath.Join(root, "a_b_c_d"), filepath.Join(root, "_b_"+apiUID),
		filepath.Join(root, "ns_web_"+apiUID+".bak"), filepath.Join(root, "ns_web_uid-1"), filepath.Join(root, "Backup_Web_"+apiUID),
		filepath.Join(root, "journal_host_"+strings.ToUpper(staticUID)+"x"), filepath.Join(root, "ns_web_"+strings.ReplaceAll(apiUID, "-", "_")))
	touch(t, filepath.Join(root, "ns_file_"+apiUID[:35]+"0"))
	got, err := scanPodLogDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got {
		names = append(names, d.Name+"="+d.PodUID)
		if d.ModTime.IsZero() {
			t.Errorf("%s: no modification time", d.Name)
		}
	}
	if diff := cmp.Diff([]string{"kube-system_etcd-n1_" + staticUID + "=" + staticUID, "ns_web_" + apiUID + "=" + apiUID}, names, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("pod log dirs (-want +got):\n%s", diff)
	}
	if got, err := scanPodLogDirs(filepath.Join(root, "missing")); err != nil || got != nil {
		t.Errorf("missing directory: %v, %v; want nothing and no error", got, err)
	}
}

func TestScanLogLinks(t *testing.T) {
	root := t.TempDir()
	logs := filepath.Join(root, "containers")
	target := filepath.Join(root, "pods", "ns_web_u", "app", "0.log")
	touch(t, target)
	mkdirs(t, logs)
	id := strings.Repeat("ab", 32)
	const rotUID = "6f58246d-8219-4c2a-a0ed-86724aaec471"
	for name, to := range map[string]string{
		"web_ns_app-" + id + ".log":       target,
		"web_ns_old-" + id[:63] + "c.log": filepath.Join(root, "pods", "gone", "0.log"),
		"web_ns_rel-" + id[:63] + "d.log": filepath.Join("..", "pods", "gone", "1.log"),
		"web_ns_far-" + id[:63] + "e.log": "/nonexistent-nodegc-test/pods/ns_web_u/far/0.log",
		"web_ns_rot-" + id[:63] + "f.log": filepath.Join(root, "pods", "ns_web_"+rotUID, "rot", "3.log"),
		"notalog-x.txt":                   target,
	} {
		if err := os.Symlink(to, filepath.Join(logs, name)); err != nil {
			t.Fatal(err)
		}
	}
	touch(t, filepath.Join(logs, "plain-file.log"))
	got, err := scanLogLinks(logs, filepath.Join(root, "pods"))
	if err != nil {
		t.Fatal(err)
	}
	// A link whose target lies outside the pod logs directory cannot be
	// told dangling from nodegc's container, which mounts only the log
	// directories (far): before, it counted as dangling, and every link
	// of a kubelet writing elsewhere went, the running containers' too.
	want := []LogLink{
		{Name: "web_ns_app-" + id + ".log", ContainerID: id, Dangling: false},
		{Name: "web_ns_old-" + id[:63] + "c.log", ContainerID: id[:63] + "c", Dangling: true},
		{Name: "web_ns_rel-" + id[:63] + "d.log", ContainerID: id[:63] + "d", Dangling: true},
		{Name: "web_ns_far-" + id[:63] + "e.log", ContainerID: id[:63] + "e", Dangling: false, Elsewhere: true},
		// A target laid out as the kubelet's logs says whose log it is.
		{Name: "web_ns_rot-" + id[:63] + "f.log", ContainerID: id[:63] + "f", Dangling: true, Target: &LogTarget{PodUID: rotUID, Container: "rot", Attempt: 3}},
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b LogLink) bool { return a.Name < b.Name })); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
}

func TestLegacyLinkName(t *testing.T) {
	id := strings.Repeat("0123456789abcdef", 4)
	if got, want := legacyLinkName("web", "team", "app", id), "web_team_app-"+id+".log"; got != want {
		t.Errorf("legacyLinkName = %q, want %q", got, want)
	}
	long := legacyLinkName(strings.Repeat("p", 200), "ns", "app", id)
	if len(long) != maxFileNameLen || !strings.HasSuffix(long, ".log") {
		t.Errorf("a long name is cut to %d bytes ending in .log: got %d bytes %q", maxFileNameLen, len(long), long)
	}
	if got := containerIDFromLink(legacyLinkName("web", "team", "my-app", id)); got != id {
		t.Errorf("containerIDFromLink = %q, want %q", got, id)
	}
}

func TestWithin(t *testing.T) {
	cases := map[string]struct {
		path, dir string
		want      bool
	}{
		"inside":          {"/var/log/pods/ns_a_u/app/0.log", "/var/log/pods", true},
		"the dir itself":  {"/var/log/pods", "/var/log/pods", false},
		"outside":         {"/etc/passwd", "/var/log/pods", false},
		"escaping":        {"/var/log/pods/../../../etc/passwd", "/var/log/pods", false},
		"prefix sibling":  {"/var/log/pods-other/x.log", "/var/log/pods", false},
		"relative path":   {"ns_a_u/app/0.log", "/var/log/pods", false},
		"dir with slash":  {"/var/log/pods/x/0.log", "/var/log/pods/", true},
		"dotdot-ish name": {"/var/log/pods/..x/0.log", "/var/log/pods", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := within(tc.path, tc.dir); got != tc.want {
				t.Errorf("within(%q, %q) = %v, want %v", tc.path, tc.dir, got, tc.want)
			}
		})
	}
}

// TestRemoveContainerLogs: the log file, its rotated siblings and the link
// go; other attempts' logs stay; a log path outside the pod logs
// directory is never touched.
func TestRemoveContainerLogs(t *testing.T) {
	root := t.TempDir()
	pods, links := filepath.Join(root, "pods"), filepath.Join(root, "containers")
	dir := filepath.Join(pods, "ns_web_u", "app")
	logPath := filepath.Join(dir, "1.log")
	touch(t, logPath, logPath+".20261121-120000", logPath+".20261121-110000.gz", filepath.Join(dir, "10.log"), filepath.Join(dir, "0.log"))
	c := ctr("u", "app", 1, StateExited, 0)
	c.PodName, c.PodNamespace, c.ID = "web", "ns", strings.Repeat("c", 64)
	link := filepath.Join(links, legacyLinkName("web", "ns", "app", c.ID))
	mkdirs(t, links)
	if err := os.Symlink(logPath, link); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "elsewhere.log")
	touch(t, outside)

	if err := removeContainerLogs(logPath, pods, links, &c); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{logPath, logPath + ".20261121-120000", logPath + ".20261121-110000.gz", link} {
		if exists(gone) {
			t.Errorf("%s still exists", gone)
		}
	}
	for _, kept := range []string{filepath.Join(dir, "10.log"), filepath.Join(dir, "0.log")} {
		if !exists(kept) {
			t.Errorf("%s was removed", kept)
		}
	}
	if err := removeContainerLogs(outside, pods, links, &c); err != nil {
		t.Fatal(err)
	}
	if !exists(outside) {
		t.Errorf("a log path outside the pod logs directory was removed")
	}
	// Twice is fine: what is gone is done.
	if err := removeContainerLogs(logPath, pods, links, &c); err != nil {
		t.Errorf("second removal: %v", err)
	}
}

// TestLongNamesLinkOfAnotherInstanceStays: with a pod name, namespace and
// container name the API server accepts but long enough (177, 40 and 40
// bytes: the pod's log directory, NAMESPACE_NAME_UID, leaves room for no
// longer pod name with that namespace) that the kubelet's 255-byte cut leaves no container ID in the
// link name, every instance of the container, in this pod and in any later
// pod of that name, has the same link name; the kubelet made the link for
// one of them. Removing an old instance's logs removes the link only when
// it points at that instance's log path or dangles; one that points at
// another instance's log (the running or newest one's) stays. Where the
// log path is unknown (the container was removed by another since the
// plan), only a dangling link goes.
func TestLongNamesLinkOfAnotherInstanceStays(t *testing.T) {
	podName, ns, name := strings.Repeat("a", 177), strings.Repeat("n", 40), strings.Repeat("c", 40)
	instance := func(id byte) Container {
		return Container{ID: strings.Repeat(string(id), 64), PodName: podName, PodNamespace: ns, Name: name, Managed: true, PodUID: "u", State: StateExited}
	}
	old, newer := instance('a'), instance('b')
	for _, tc := range []struct {
		name    string
		target  string // what the link points at, under the test's root
		logPath string // the old instance's log path as its status gives it, under the root; "" when unknown
		removed bool
	}{
		{"it points at the newer instance's log", "pods/u/c/1.log", "pods/u/c/0.log", false},
		{"it points at the old instance's log", "pods/u/c/0.log", "pods/u/c/0.log", true},
		// A log path outside the pod logs directory is left alone, and
		// the link to it goes, as the kubelet's removal does.
		{"it points at the old instance's log, left alone outside the pod logs directory", "elsewhere/0.log", "elsewhere/0.log", true},
		{"it dangles", "pods/u/c/9.log", "pods/u/c/0.log", true},
		{"log path unknown, it points at the newer instance's log", "pods/u/c/1.log", "", false},
		{"log path unknown, it points at the old instance's log", "elsewhere/0.log", "", false},
		{"log path unknown, it dangles", "pods/u/c/9.log", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			pods, links := filepath.Join(root, "pods"), filepath.Join(root, "containers")
			touch(t, filepath.Join(pods, "u", "c", "0.log"), filepath.Join(pods, "u", "c", "1.log"), filepath.Join(root, "elsewhere", "0.log"))
			mkdirs(t, links)
			link, ok := linkOf(links, &newer)
			if !ok {
				t.Fatal("no link name for the names the API server accepts")
			}
			if other, _ := linkOf(links, &old); other != link {
				t.Fatalf("the instances' link names differ (%s, %s): the cut keeps part of the ID", filepath.Base(other), filepath.Base(link))
			}
			if err := os.Symlink(filepath.Join(root, tc.target), link); err != nil {
				t.Fatal(err)
			}
			logPath := ""
			if tc.logPath != "" {
				logPath = filepath.Join(root, tc.logPath)
			}
			if err := removeContainerLogs(logPath, pods, links, &old); err != nil {
				t.Fatal(err)
			}
			if got := !exists(link); got != tc.removed {
				t.Errorf("removing the logs of instance %s… (log path %q) with the link pointing at %s: link removed %v, want %v",
					old.ID[:8], tc.logPath, tc.target, got, tc.removed)
			}
		})
	}
	// A name that keeps the ID is this container's link, as the kubelet
	// made it: it goes whatever it points at, the log path unknown too.
	root := t.TempDir()
	links := filepath.Join(root, "containers")
	c := ctr("u", "app", 0, StateExited, 0)
	c.ID = strings.Repeat("d", 64)
	link, _ := linkOf(links, &c)
	touch(t, filepath.Join(root, "elsewhere", "0.log"))
	mkdirs(t, links)
	if err := os.Symlink(filepath.Join(root, "elsewhere", "0.log"), link); err != nil {
		t.Fatal(err)
	}
	if err := removeContainerLogs("", "", links, &c); err != nil {
		t.Fatal(err)
	}
	if exists(link) {
		t.Errorf("%s, whose name ends in the container's ID, stayed after its container's logs were removed (log path unknown); want it removed", filepath.Base(link))
	}
}

// TestLinkOfRotatingInstanceStays: with a long pod name, namespace and
// container name, the kubelet's cut leaves no ID in the link's name, and
// every instance of the container has that name. The link points at the
// running instance's log (attempt 1), which is missing for a moment while
// the kubelet rotates it: removing the old instance's logs then must not
// take the link (before, a dangling link counted as any instance's). A
// link that dangles at the old instance's own log goes with it; one at a
// log of another kind of path (not the kubelet's layout) too.
func TestLinkOfRotatingInstanceStays(t *testing.T) {
	const uid = "6f58246d-8219-4c2a-a0ed-86724aaec471"
	podName, ns, name := strings.Repeat("a", 177), strings.Repeat("n", 40), strings.Repeat("c", 40)
	old := Container{ID: strings.Repeat("a", 64), PodName: podName, PodNamespace: ns, Name: name, Managed: true, PodUID: uid, State: StateExited}
	for _, tc := range []struct {
		name    string
		target  string // under the pod's log directory, missing
		removed bool
	}{
		{"at the running instance's log, rotating", name + "/1.log", false},
		{"at the old instance's own log", name + "/0.log", true},
		{"at a file not laid out as the kubelet's logs", name + "/1.log.20261130-021500", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			pods, links := filepath.Join(root, "pods"), filepath.Join(root, "containers")
			podDir := filepath.Join(pods, ns+"_"+podName+"_"+uid)
			touch(t, filepath.Join(podDir, name, "0.log"), filepath.Join(podDir, name, "1.log.20261130-021500.gz"))
			mkdirs(t, links)
			link, ok := linkOf(links, &old)
			if !ok || containerIDFromLink(filepath.Base(link)) != "" {
				t.Fatalf("link %q: want a name the cut left no ID", filepath.Base(link))
			}
			if err := os.Symlink(filepath.Join(podDir, tc.target), link); err != nil {
				t.Fatal(err)
			}
			if err := removeContainerLogs(filepath.Join(podDir, name, "0.log"), pods, links, &old); err != nil {
				t.Fatal(err)
			}
			if got := !exists(link); got != tc.removed {
				t.Errorf("removing the logs of attempt 0 with the link pointing at %s: link removed %v, want %v", tc.target, got, tc.removed)
			}
		})
	}
}

// TestLogLinkNamedByLabelsStaysInItsDirectory: a container's link is named
// from its pod's labels, which whoever creates containers through the
// runtime writes. Labels that are not names the API server gives (a pod
// name with path elements, long enough that the cut drops the container's
// ID) name no link: nothing outside the container logs directory, nor
// anything but a symbolic link in it, is removed.
func TestLogLinkNamedByLabelsStaysInItsDirectory(t *testing.T) {
	root := t.TempDir()
	pods, links := filepath.Join(root, "pods"), filepath.Join(root, "containers")
	victim := filepath.Join(pods, "ns_victim_u", "app", "0.log")
	mkdirs(t, links)
	// What the cut leaves of the name is "../pods/ns_victim_u/app/" and
	// slashes up to "0", then ".log".
	const prefix = "../pods/ns_victim_u/app/"
	crafted := prefix + strings.Repeat("/", maxFileNameLen-len(logSuffix)-len(prefix)-1) + "0"
	// escape is a label that, after what the link name puts before it,
	// leaves the directory and names the victim, the cut dropping the rest.
	escape := func(before string) string {
		const up = "../../../pods/ns_victim_u/app/"
		return up + strings.Repeat("/", maxFileNameLen-len(logSuffix)-len(before)-len(up)-1) + "0"
	}
	for _, tc := range []struct {
		name                 string
		pod, namespace, ctnr string
	}{
		{name: "pod name with path elements", pod: crafted, namespace: "ns", ctnr: "app"},
		// "web_.." is one element, so two more ".." leave the directory.
		{name: "namespace with path elements", pod: "web", namespace: escape("web_"), ctnr: "app"},
		{name: "container name with path elements", pod: "web", namespace: "ns", ctnr: escape("web_ns_")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			touch(t, victim)
			c := ctr("u2", tc.ctnr, 1, StateExited, 0)
			c.PodName, c.PodNamespace, c.ID = tc.pod, tc.namespace, strings.Repeat("d", 64)
			if err := removeContainerLogs("", pods, links, &c); err != nil {
				t.Errorf("removeContainerLogs: %v", err)
			}
			if !exists(victim) {
				t.Fatalf("%s was removed through the link name %q", victim, legacyLinkName(c.PodName, c.PodNamespace, c.Name, c.ID))
			}
		})
	}
	// A regular file where the link would be is not the kubelet's link.
	c := ctr("u3", "app", 1, StateExited, 0)
	c.PodName, c.PodNamespace, c.ID = "web", "ns", strings.Repeat("e", 64)
	file := filepath.Join(links, legacyLinkName(c.PodName, c.PodNamespace, c.Name, c.ID))
	touch(t, file)
	if err := removeContainerLogs("", pods, links, &c); err != nil {
		t.Errorf("removeContainerLogs: %v", err)
	}
	if !exists(file) {
		t.Errorf("a regular file named as the container's link was removed")
	}
}

// TestContainerLogFilesStayInTheirDirectory: the files a container's log
// removal takes are LOGPATH and its rotated siblings, matched as text (a
// log path may hold * or [, which as a pattern would match other files),
// in a directory reached without a symbolic link below the pod logs
// directory (which may itself be one, as /var/log/pods on a node that
// keeps logs on another disk).
func TestContainerLogFilesStayInTheirDirectory(t *testing.T) {
	root := t.TempDir()
	real, pods := filepath.Join(root, "disk", "pods"), filepath.Join(root, "pods")
	mkdirs(t, real)
	if err := os.Symlink(real, pods); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(pods, "ns_a_ua", "app")
	touch(t, filepath.Join(a, "0.log"), filepath.Join(a, "0.log.20261129-060000"), filepath.Join(a, "x*.log"), filepath.Join(a, "xa.log"))
	names := func(files []string) []string {
		var out []string
		for _, f := range files {
			out = append(out, filepath.Base(f))
		}
		return out
	}
	got, err := containerLogFiles(filepath.Join(a, "0.log"), pods)
	if err != nil || !slices.Equal(names(got), []string{"0.log", "0.log.20261129-060000"}) {
		t.Errorf("through a linked pod logs directory: %q, %v; want the log and its rotated sibling", names(got), err)
	}
	if got, err := containerLogFiles(filepath.Join(a, "x*.log"), pods); err != nil || !slices.Equal(names(got), []string{"x*.log"}) {
		t.Errorf("a log path with *: %q, %v; want that file alone", names(got), err)
	}
	// Pod b's directory for app is a link to pod a's.
	b := filepath.Join(pods, "ns_b_ub", "app")
	mkdirs(t, filepath.Dir(b))
	if err := os.Symlink(a, b); err != nil {
		t.Fatal(err)
	}
	if got, err := containerLogFiles(filepath.Join(b, "0.log"), pods); err == nil || len(got) != 0 {
		t.Errorf("through a linked log directory: %q, %v; want nothing and an error", names(got), err)
	}
	if got, err := containerLogFiles(filepath.Join(pods, "ns_gone_u", "app", "0.log"), pods); err != nil || len(got) != 0 {
		t.Errorf("a directory already gone: %q, %v; want nothing, no error", names(got), err)
	}
}

// TestPresenceBelow: a path below the pod logs directory is absent only
// where a component reached without a symbolic link is missing (ENOENT);
// below a symbolic link at or under a pod's log directory (one moved to
// another disk and linked in its place, which nodegc's container may not
// mount), below a component that is not a directory, or outside the pod
// logs directory, it cannot be told. The pod logs directory itself may be
// a symbolic link.
func TestPresenceBelow(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real-pods")
	touch(t, filepath.Join(real, "ns_p_u", "app", "0.log"), filepath.Join(real, "ns_f_u"), filepath.Join(root, "moved", "ns_m_u", "app", "0.log"))
	mkdirs(t, filepath.Join(real, "ns_e_u"))
	for link, target := range map[string]string{
		filepath.Join(root, "pods"):                   real,                                         // podLogsDirectory through a link
		filepath.Join(real, "ns_m_u"):                 filepath.Join(root, "moved", "ns_m_u"),       // moved, seen
		filepath.Join(real, "ns_x_u"):                 filepath.Join(root, "not-mounted", "ns_x_u"), // moved, not seen
		filepath.Join(real, "ns_p_u", "app", "1.log"): filepath.Join(root, "moved", "ns_m_u", "app", "0.log"),
		filepath.Join(real, "ns_e_u", "app"):          filepath.Join(root, "not-mounted", "app"),
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	for _, podLogs := range []string{real, filepath.Join(root, "pods")} {
		for path, want := range map[string]presence{
			"ns_p_u/app/0.log":    present,
			"ns_p_u/app":          present,
			"ns_p_u/app/2.log":    absent,
			"ns_p_u/db/0.log":     absent,
			"ns_q_u/app/0.log":    absent,
			"ns_m_u/app/0.log":    untold, // through a link, though it exists there
			"ns_x_u/app/0.log":    untold, // through a link nodegc cannot follow
			"ns_x_u":              untold,
			"ns_e_u/app/0.log":    untold,
			"ns_p_u/app/1.log":    untold, // a link itself
			"ns_f_u/app/0.log":    untold, // below a file: ENOTDIR
			"ns_p_u/app/../x.log": absent, // cleaned: ns_p_u/x.log
			"../elsewhere/0.log":  untold,
			".":                   untold,
		} {
			if got := presenceBelow(filepath.Join(podLogs, path), podLogs); got != want {
				t.Errorf("presenceBelow(%s) under %s = %d, want %d", path, podLogs, got, want)
			}
		}
	}
	if got := presenceBelow("/etc/passwd", real); got != untold {
		t.Errorf("a path outside the pod logs directory: %d, want %d (untold)", got, untold)
	}
}

// TestLinkThroughSymlinkedPodLogDirDoesNotDangle: on a full disk the
// operator moved one big pod's log directory to another disk and left a
// symbolic link in its place (mv /var/log/pods/ns_p_UID /data/ && ln -s
// /data/ns_p_UID /var/log/pods/). The kubelet and the runtime write through
// the link; nodegc's container mounts the log directories only, so /data
// is not there. Before, a link target under podLogsDirectory was stat'ed
// through the link, ENOENT, and the link dangled: the links of live pod
// p's exited instances went, the newest dead one's (app/2) among them,
// which the kubelet keeps. Now a target below a symbolic link in the pod
// logs directory cannot be told, and its link stays; nor does p's running
// container make the pod logs unseen, as pod q's shows nodegc's view is
// the kubelet's.
func TestLinkThroughSymlinkedPodLogDirDoesNotDangle(t *testing.T) {
	f := livePodsFixture(t)

	// p's log directory is a link to a disk nodegc does not mount.
	pDir := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("p"))
	if err := os.RemoveAll(pDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(t.TempDir(), "not-mounted-in-nodegc", fixtureLogDir("p")), pDir); err != nil {
		t.Fatal(err)
	}
	qLogs := filepath.Join(f.cfg.PodLogsDirectory, fixtureLogDir("q"), "db")
	mkdirs(t, qLogs, f.cfg.ContainerLogsDirectory)
	touch(t, filepath.Join(qLogs, "0.log"))
	f.addSandbox(sbx("q", 0, true, 5*time.Hour))
	f.rt.addContainer(with(ctr("q", "db", 0, StateRunning, 5*time.Hour), func(c *Container) { c.ID, c.PodUID = "bbbbbbbbbbbb0", fixtureUID("q") }),
		filepath.Join(qLogs, "0.log"))

	logs := filepath.Join(pDir, "app")
	for attempt, id := range map[uint32]string{1: "aaaaaaaaaaaa1", 2: "aaaaaaaaaaaa2", 3: "aaaaaaaaaaaa3"} {
		f.addLinkedInstance(t, logs, attempt, id, attempt == 3, time.Duration(4-attempt)*time.Hour)
	}
	r, err := f.manager(t, nil).Plan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.PodLogsUnseen {
		t.Error("the plan says the pod logs are unseen, though the one log it cannot tell is below a pod log directory that is a symbolic link, and q's is seen")
	}
	for _, d := range r.RemoveLogLinks {
		t.Errorf("link %s removed as %s: its target lies below a pod log directory that is a symbolic link nodegc cannot follow, so whether it exists cannot be told", d.Link.Name, d.Reason)
	}
	links, err := scanLogLinks(f.cfg.ContainerLogsDirectory, f.cfg.PodLogsDirectory)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Dangling || l.Elsewhere {
			t.Errorf("link %s: dangling %t, elsewhere %t; want neither (its target cannot be told, and podLogsDirectory is the kubelet's)", l.Name, l.Dangling, l.Elsewhere)
		}
	}
}
