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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/pkg/cri"
)

// logViewSamples is how many running containers the runtime is asked the
// log path of, at most, per snapshot (podLogsUnseen): those whose log is
// not where the kubelet lays logs out.
const logViewSamples = 10

// podLogsUnseen says whether nodegc's view of the pod logs directory
// podLogs is not the kubelet's (NodeState.PodLogsUnseen), and names a log
// it lacks, or why it cannot tell. A running container's log exists as
// long as it runs (during a rotation, its rotated sibling: missing), so one
// missing where the runtime writes it says that nodegc does not see what
// the kubelet sees there: a filesystem mounted on the directory on the host
// after nodegc's container started, which a mount without propagation does
// not show. A log that is there proves nothing: the directory nodegc still
// sees may hold a copy of the logs made before that mount (copied, then
// mounted over), frozen, while every log written since is on the new
// filesystem alone.
//
// So it looks for the log of every managed running container where the
// kubelet lays logs out (<podLogs>/<namespace>_<pod>_<uid>/<container>/<attempt>.log,
// from the labels). A container whose log is missing there, or whose
// labels make no such path, has the runtime asked for its log path, up to
// logViewSamples containers: a log path under podLogs that is missing makes
// the logs unseen, and so does one outside podLogs while no running
// container's log is seen under podLogs (a kubelet podLogsDir nodegc was
// not told): nodegc cannot remove such a container's log files, which
// would stay until its pod is deleted. Beside logs under podLogs, one
// outside tells nothing (a kubelet podLogsDir moved: the pods that ran
// before the move log in the old one until they restart). Nor is podLogs
// given as the target of a link the kubelet writes through told apart:
// the logs are there, under another path than the runtime's. One unknown
// tells nothing, nor does a container that the runtime no longer has or that
// exited meanwhile (the kubelet removes a dead
// container's log before the container); another error means it cannot
// tell, which counts as unseen: that keeps things. A node that runs no
// container cannot tell: the logs count as seen. A log deleted by hand while its container runs makes
// them unseen too, until that container ends.
func podLogsUnseen(ctx context.Context, rt statusReader, cs []Container, podLogs string) (unseen bool, why string) {
	if podLogs == "" {
		return false, ""
	}
	asked, present, outside := 0, 0, ""
	for i := range cs {
		c := &cs[i]
		if !c.Managed || c.State != StateRunning {
			continue
		}
		if p, ok := kubeletLogPath(podLogs, c); ok && !missing(p, podLogs) {
			present++
			continue
		}
		if asked == logViewSamples {
			continue
		}
		asked++
		st, err := rt.ContainerStatus(ctx, c.ID)
		switch {
		case cri.IsNotFound(err):
			continue // exited and removed meanwhile
		case err != nil:
			return true, fmt.Sprintf("the log path of running container %s cannot be read: %v", c.ID, err)
		case st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING:
			continue // exited meanwhile: the kubelet may be removing its log
		}
		switch p := st.GetLogPath(); {
		case p == "" || !filepath.IsAbs(p):
			// It cannot tell.
		case !within(p, podLogs):
			if outside == "" {
				outside = p
			}
		case missing(p, podLogs):
			return true, p
		default:
			present++
		}
	}
	if outside != "" && present == 0 {
		return true, fmt.Sprintf("%s, outside the pod logs directory, where no running container's log is: the kubelet's "+
			"podLogsDir is another (set containerGC.podLogsDirectory to the directory the kubelet writes, and mount it)", outside)
	}
	return false, ""
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

// missing says whether neither the log at path, below podLogs, nor a
// rotated sibling of it exists: the kubelet rotates a log by renaming it
// PATH.<timestamp>, and has the runtime open it anew only then. What
// cannot be told (presenceBelow: a log reached through a symbolic link
// below podLogs, such as a pod's log directory moved to another disk and
// linked in its place; an error that does not say it is absent, such as
// permission denied) is not taken for its absence: one such pod does not
// make the whole view unseen.
func missing(path, podLogs string) bool {
	if presenceBelow(path, podLogs) != absent {
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
