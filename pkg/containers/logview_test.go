package containers

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPodLogsUnseen: the pod logs count as unseen only when the runtime
// runs containers whose logs lie under the pod logs directory and nodegc
// sees none of them; one log seen where the kubelet lays them out settles
// it without asking the runtime, and a log path elsewhere tells nothing.
func TestPodLogsUnseen(t *testing.T) {
	const uid = "0a000000-0000-4000-8000-00000000000a"
	running := with(ctr("p", "app", 2, StateRunning, time.Hour), func(c *Container) { c.ID, c.PodUID = "run", uid })
	for _, tc := range []struct {
		name string
		// logPath is the running container's log path, relative to
		// the pod logs directory unless absolute; files exist there.
		logPath    string
		files      []string
		containers []Container
		unseen     bool
		asked      bool // the runtime was asked for the log path
	}{
		{name: "no running container", containers: []Container{dead("p", "app", 1, time.Hour)}},
		{name: "unmanaged running container", logPath: "x/0.log",
			containers: []Container{with(running, func(c *Container) { c.Managed = false })}},
		{name: "log where the kubelet lays it out", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/2.log"},
			containers: []Container{running}},
		{name: "log seen at the runtime's path", logPath: "elsewhere/app.log", files: []string{"elsewhere/app.log"},
			containers: []Container{running}, asked: true},
		{name: "log path outside the pod logs directory", logPath: "/var/lib/other/app.log",
			containers: []Container{running}, asked: true},
		{name: "no log path", containers: []Container{running}, asked: true},
		{name: "log rotating: only its rotated sibling", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/2.log.20261130-021500"},
			containers: []Container{running}},
		{name: "another attempt's log only", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_p_" + uid + "/app/20.log"},
			containers: []Container{running}, unseen: true, asked: true},
		{name: "log not seen", logPath: "ns_p_" + uid + "/app/2.log",
			containers: []Container{running}, unseen: true, asked: true},
		{name: "one of two seen", logPath: "ns_p_" + uid + "/app/2.log", files: []string{"ns_q_" + uid[:35] + "b/app/0.log"},
			containers: []Container{running, with(running, func(c *Container) { c.ID, c.PodName, c.PodUID, c.Attempt = "run2", "q", uid[:35]+"b", 0 })}},
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
			unseen, example := podLogsUnseen(t.Context(), rt, tc.containers, podLogs)
			if unseen != tc.unseen || unseen != (example != "") || unseen && example != logPath {
				t.Errorf("podLogsUnseen = %t, %q; want %t (example %q)", unseen, example, tc.unseen, logPath)
			}
			asked := slices.ContainsFunc(rt.callLog(), func(c string) bool { return strings.HasPrefix(c, "ContainerStatus ") })
			if asked != tc.asked {
				t.Errorf("the runtime was asked for a log path: %t, want %t (calls %v)", asked, tc.asked, rt.callLog())
			}
		})
	}
}
