package containers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// logViewSamples is how many running containers the runtime is asked the
// log path of, at most, when none of their logs is where the kubelet lays
// them out (podLogsUnseen).
const logViewSamples = 10

// podLogsUnseen says whether the pod logs directory podLogs, as nodegc
// sees it, lacks the log of every running container whose log lies under
// it (NodeState.PodLogsUnseen), and names one such log. A running
// container's log exists as long as it runs (during a rotation, its
// rotated sibling: missing), so if the runtime writes logs there and
// nodegc sees none, nodegc's view of the directory is not the kubelet's: a
// filesystem mounted on it on the host after nodegc's container started,
// which a mount without propagation does not show.
//
// It looks first where the kubelet lays logs out
// (<podLogs>/<namespace>_<pod>_<uid>/<container>/<attempt>.log, from the
// labels): one log seen there settles it without a runtime call. Otherwise
// it asks the runtime for the log paths of up to logViewSamples running
// containers: a log path outside podLogs (a kubelet podLogsDir nodegc was
// not told) or unknown tells nothing, and one seen settles it. A node that
// runs no container, or whose runtime writes no log under podLogs, cannot
// tell: the logs count as seen.
func podLogsUnseen(ctx context.Context, rt statusReader, cs []Container, podLogs string) (unseen bool, example string) {
	if podLogs == "" {
		return false, ""
	}
	var running []*Container
	for i := range cs {
		if c := &cs[i]; c.Managed && c.State == StateRunning {
			running = append(running, c)
		}
	}
	for _, c := range running {
		if p, ok := kubeletLogPath(podLogs, c); ok && !missing(p) {
			return false, ""
		}
	}
	for _, c := range running[:min(len(running), logViewSamples)] {
		st, err := rt.ContainerStatus(ctx, c.ID)
		if err != nil {
			continue // exited and removed meanwhile, or unknown
		}
		p := st.GetLogPath()
		if p == "" || !within(p, podLogs) {
			continue
		}
		if !missing(p) {
			return false, ""
		}
		if example == "" {
			example = p
		}
	}
	return example != "", example
}

// kubeletLogPath is where the kubelet lays out c's log under podLogs, if
// c's labels are names the API server gives (linkOf).
func kubeletLogPath(podLogs string, c *Container) (string, bool) {
	dir := c.PodNamespace + "_" + c.PodName + "_" + c.PodUID
	if _, ok := podUIDFromLogDir(dir); !ok || len(validation.IsDNS1123Label(c.Name)) > 0 {
		return "", false
	}
	return filepath.Join(podLogs, dir, c.Name, fmt.Sprintf("%d%s", c.Attempt, logSuffix)), true
}

// missing says whether neither the log at path nor a rotated sibling of it
// exists: the kubelet rotates a log by renaming it PATH.<timestamp>, and
// has the runtime open it anew only then. An error that does not say they
// are absent (permission denied) is not taken for their absence.
func missing(path string) bool {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), base+".") {
			return false
		}
	}
	return true
}
