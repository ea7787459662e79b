package containers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/pkg/cri"
)

// remover is what the executor needs of the runtime.
type remover interface {
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
	StopContainer(ctx context.Context, id string, gracePeriodSeconds int64) error
	RemoveContainer(ctx context.Context, id string) error
	PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error)
	StopPodSandbox(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
}

var _ remover = (*cri.Client)(nil)

// Operations that can fail, a metric label.
const (
	OpContainerStatus = "container_status"
	OpStopContainer   = "stop_container"
	OpRemoveLogs      = "remove_container_logs"
	OpRemoveContainer = "remove_container"
	OpSandboxStatus   = "sandbox_status" // also the listing of a sandbox's containers right before its removal
	OpStopSandbox     = "stop_sandbox"
	OpRemoveSandbox   = "remove_sandbox"
	OpRemoveLogDir    = "remove_log_dir"
	OpRemoveLogLink   = "remove_log_link"
	OpListRuntime     = "list_runtime"
	OpScanLogs        = "scan_logs"
	OpReadExitTime    = "read_exit_time"
	OpReadVersion     = "read_version" // the runtime's Version could not be asked: the run does not check it against the Node's (ViewNodeOtherRuntime)
	OpReadBytes       = "read_bytes"   // a writable layer, log path or log directory could not be sized: counted 0
	OpReclaim         = "reclaim"      // the runtime was not made to free removed writable layers at once (Options.Reclaimer)
)

// Grace periods, in seconds, for stopping a container in an unknown state.
const (
	minimumGracePeriod = 2  // kubelet's minimumGracePeriodInSeconds
	defaultGracePeriod = 30 // a pod's default terminationGracePeriodSeconds
)

// Why a planned removal was not done although nothing failed.
const (
	SkipStarted       = "started"        // the container runs now (created containers can be started after planning); a dangling log link's container has not exited (created, running or unknown)
	SkipChanged       = "changed"        // the container's state differs from the planned one (a created one ran and exited since): the next run plans it again
	SkipPodFailed     = "pod_failed"     // a removal of the same pod failed: its log directory waits for the next run
	SkipSandboxInUse  = "sandbox_inuse"  // a container of the sandbox could not be removed, or is there since planning, or the sandbox is ready again
	SkipGone          = "gone"           // removed by another since planning (the kubelet's GC): nothing of nodegc's doing, nor counted as its removal
	SkipPointsAgain   = "points_again"   // a log link dangling when planned points at a log again (the kubelet rotated the log)
	SkipLogsElsewhere = "logs_elsewhere" // a live pod's container whose log the runtime writes outside podLogsDirectory: nodegc could not remove its log files, the kubelet's GC can
)

// logPaths are the log locations the executor cleans.
type logPaths struct {
	// PodLogs is the pod logs directory (/var/log/pods).
	PodLogs string
	// ContainerLogs is the directory of the kubelet's log links
	// (/var/log/containers).
	ContainerLogs string
}

// Skip is a planned removal the executor did not do, and why.
type Skip struct {
	Kind, ID, Why string
}

// Outcome is what applying a plan did.
type Outcome struct {
	// DryRun says nothing was removed: the lists say what would have been.
	DryRun bool
	// Containers, Sandboxes, LogDirs and LogLinks list what was removed,
	// with the plan's reasons (what another removed since planning is
	// skipped, SkipGone).
	Containers []ContainerDecision
	Sandboxes  []SandboxDecision
	LogDirs    []LogDirDecision
	LogLinks   []LogLinkDecision
	// Skipped lists planned removals not done for a reason that is not an
	// error.
	Skipped []Skip
	// Failures counts failed operations by Op* value.
	Failures map[string]int
}

// execute applies plan: containers (stopping those in an unknown state
// first, removing their log files and links as the kubelet does, but only
// after the container itself unless it had exited), then
// sandboxes (stop, then remove), then pod log directories and dangling log
// links. Right before removing a container it reads the container's status:
// a container that runs by then is skipped, so a running container is never
// removed, and so is one whose state is no longer the planned one (but for
// unknown to exited: SkipChanged), as its pod's other items are for a
// container that runs. A container or sandbox gone by then (status NotFound), and a log
// directory or link gone by then, are skipped (SkipGone): no failure, and
// not nodegc's removal. A sandbox one of whose containers could not be removed is kept,
// and so is the log directory of a pod any removal of which failed. One
// failure does not stop the others: failures are joined into the error. A
// cancelled ctx stops between items. In dry-run the runtime and the
// filesystem are not touched and the outcome lists what the plan removes.
func execute(ctx context.Context, rt remover, plan *Plan, paths logPaths, dryRun bool) (*Outcome, error) {
	e := &executor{rt: rt, paths: paths, out: &Outcome{DryRun: dryRun, Failures: map[string]int{}},
		failedPods: map[string]bool{}, busySandboxes: map[string]bool{}, staying: stayingLogKeys(plan)}
	if dryRun {
		tellDryRun(ctx, plan)
		e.out.Containers = append(e.out.Containers, plan.RemoveContainers...)
		e.out.Sandboxes = append(e.out.Sandboxes, plan.RemoveSandboxes...)
		e.out.LogDirs = append(e.out.LogDirs, plan.RemoveLogDirs...)
		e.out.LogLinks = append(e.out.LogLinks, plan.RemoveLogLinks...)
		return e.out, nil
	}
	e.total = len(plan.RemoveContainers) + len(plan.RemoveSandboxes) + len(plan.RemoveLogDirs) + len(plan.RemoveLogLinks)
	_ = apply(ctx, e, plan.RemoveContainers, e.container) &&
		apply(ctx, e, plan.RemoveSandboxes, e.sandbox) &&
		apply(ctx, e, plan.RemoveLogDirs, e.logDir) &&
		e.listForLinks(ctx, plan.RemoveLogLinks) &&
		apply(ctx, e, plan.RemoveLogLinks, e.logLink)
	return e.out, errors.Join(e.errs...)
}

// listForLinks lists the containers again before the dangling links go: a
// container created since the plan's listing may own one (its log rotating
// as the link's turn comes), and its link stays while it has not exited,
// as the kubelet reads a link's container's status right before removing
// it. If the runtime cannot be listed, no link goes.
func (e *executor) listForLinks(ctx context.Context, links []LogLinkDecision) bool {
	if len(links) == 0 {
		return true
	}
	cs, err := e.rt.ListContainers(ctx, nil)
	if err != nil {
		e.fail(OpListRuntime, fmt.Errorf("listing the containers before removing %d dangling log links: %w", len(links), err), "", "")
		return false
	}
	e.linkContainers = make([]Container, 0, len(cs))
	for _, c := range cs {
		e.linkContainers = append(e.linkContainers, containerFromCRI(c))
	}
	return true
}

// tellDryRun logs each removal plan would make, at the default verbosity
// but for dangling links.
func tellDryRun(ctx context.Context, plan *Plan) {
	logger := klog.FromContext(ctx)
	for _, d := range plan.RemoveContainers {
		c := &d.Container
		logger.Info("Container would be removed (dry run)", "containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "attempt", c.Attempt, "reason", d.Reason)
	}
	for _, d := range plan.RemoveSandboxes {
		logger.Info("Sandbox would be removed (dry run)", "sandboxID", d.Sandbox.ID, "pod", klog.KRef(d.Sandbox.PodNamespace, d.Sandbox.PodName), "reason", d.Reason)
	}
	for _, d := range plan.RemoveLogDirs {
		logger.Info("Pod log directory would be removed (dry run)", "directory", d.Dir.Name, "podUID", d.Dir.PodUID, "reason", d.Reason)
	}
	for _, d := range plan.RemoveLogLinks {
		logger.V(2).Info("Dangling container log link would be removed (dry run)", "link", d.Link.Name, "containerID", d.Link.ContainerID)
	}
}

// apply does each removal of ds in order. Once ctx has ended it does no
// more, records how far the run got, and returns false.
func apply[D any](ctx context.Context, e *executor, ds []D, remove func(context.Context, D)) bool {
	for _, d := range ds {
		if ctx.Err() != nil {
			e.errs = append(e.errs, fmt.Errorf("container GC stopped after %d of %d planned removals: %w", e.done, e.total, ctx.Err()))
			return false
		}
		e.done++
		remove(ctx, d)
	}
	return true
}

type executor struct {
	rt            remover
	paths         logPaths
	out           *Outcome
	errs          []error
	failedPods    map[string]bool // pod UIDs with a failed or skipped removal
	busySandboxes map[string]bool // sandbox IDs with a container that stays
	done, total   int             // removals begun, and planned
	// linkContainers are the containers listed right before the links go
	// (listForLinks).
	linkContainers []Container
	// staying are the log keys of the containers that stay: the plan's
	// kept ones, and those the run keeps (logKeyOf).
	staying map[logKey]bool
}

// logKey is what the kubelet names a container's log file by:
// <attempt>.log in the directory of the container's name, in its pod's.
type logKey struct {
	podUID, name string
	attempt      uint32
}

// logKeyOf returns c's log key, and false for a container no pod's
// kubelet made (no pod UID).
func logKeyOf(c *Container) (logKey, bool) {
	return logKey{podUID: c.PodUID, name: c.Name, attempt: c.Attempt}, c.PodUID != ""
}

// attemptTaken says whether the runtime lists another instance of c's
// container (its pod UID and name) with c's attempt now: one that writes
// c's log files (sharesLog).
func (e *executor) attemptTaken(ctx context.Context, c *Container) (bool, error) {
	if c.PodUID == "" {
		return false, nil
	}
	cs, err := e.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: c.PodUID, labelContainerName: c.Name}})
	if err != nil {
		return false, err
	}
	for _, x := range cs {
		if x.GetId() != c.ID && x.GetMetadata().GetAttempt() == c.Attempt {
			return true, nil
		}
	}
	return false, nil
}

// stayingLogKeys returns the log keys of the containers p keeps.
func stayingLogKeys(p *Plan) map[logKey]bool {
	keys := map[logKey]bool{}
	for i := range p.KeepContainers {
		if k, ok := logKeyOf(&p.KeepContainers[i].Container); ok {
			keys[k] = true
		}
	}
	return keys
}

// stays records that c stays: its log files are not another's to remove.
func (e *executor) stays(c *Container) {
	if k, ok := logKeyOf(c); ok {
		e.staying[k] = true
	}
}

// sharesLog says whether a container that stays has c's log key: the
// kubelet numbers a new instance from the one newest by creation time, so
// after a step of the wall clock back every instance it makes until the
// clock catches up gets the same attempt, and writes the same log file
// (the runtime opens it to append). Removing an older one's LOGPATH*
// would take the log of the newest dead instance (kubectl logs
// --previous) and of the running one, which would go on writing to an
// unlinked file.
func (e *executor) sharesLog(c *Container) bool {
	k, ok := logKeyOf(c)
	return ok && e.staying[k]
}

func (e *executor) fail(op string, err error, podUID, sandboxID string) {
	e.out.Failures[op]++
	e.errs = append(e.errs, err)
	e.keepPod(podUID, sandboxID)
}

func (e *executor) keepPod(podUID, sandboxID string) {
	if podUID != "" {
		e.failedPods[podUID] = true
	}
	if sandboxID != "" {
		e.busySandboxes[sandboxID] = true
	}
}

func (e *executor) container(ctx context.Context, d ContainerDecision) {
	c := &d.Container
	who := fmt.Sprintf("container %s (%s of pod %s/%s)", c.ID, c.Name, c.PodNamespace, c.PodName)
	// A container this run leaves stays: the later removals leave its log
	// files (sharesLog).
	kept := true
	defer func() {
		if kept {
			e.stays(c)
		}
	}()
	st, err := e.rt.ContainerStatus(ctx, c.ID)
	switch {
	case cri.IsNotFound(err):
		kept = false
		// Removed meanwhile: done, and its link goes as the kubelet's would
		// (if it is its own: its log path unknown, one whose name has no
		// ID of it goes only if it dangles).
		if err := removeContainerLogs("", e.paths.PodLogs, e.paths.ContainerLogs, c); err != nil {
			e.fail(OpRemoveLogs, err, c.PodUID, c.SandboxID)
			return
		}
		// Whoever removed it freed its layer; its logs stay (or went with
		// it), and go with its pod's log directory, which counts them.
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "container", ID: c.ID, Why: SkipGone})
		return
	case err != nil:
		e.fail(OpContainerStatus, fmt.Errorf("%s: %w", who, err), c.PodUID, c.SandboxID)
		return
	case st.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING:
		klog.FromContext(ctx).Info("Container started after planning, keeping it", "containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name)
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "container", ID: c.ID, Why: SkipStarted})
		e.keepPod(c.PodUID, c.SandboxID)
		return
	case changedSincePlanning(c.State, stateFromCRI(st.GetState())):
		// The plan chose which instance of the unit stays from the states
		// it listed: a created leftover started since and exited is now
		// the newest instance that ran, and the older exited one the plan
		// kept for it is not. The next run plans it from a new listing.
		klog.FromContext(ctx).Info("Container changed state after planning, keeping it", "containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name,
			"planned", c.State, "now", stateFromCRI(st.GetState()))
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "container", ID: c.ID, Why: SkipChanged})
		e.keepPod(c.PodUID, c.SandboxID)
		return
	case d.Reason != ReasonPodGone && logsElsewhere(st.GetLogPath(), e.paths.PodLogs):
		// A live pod's container whose log lies where nodegc cannot remove
		// it (a kubelet podLogsDir moved, or one nodegc was not told, while
		// the logs count as seen by others under podLogsDirectory): once
		// removed, the kubelet no longer knows it, and its log files would
		// stay until the pod is deleted. The kubelet's GC removes it with
		// them. A gone pod's container goes: the kubelet removes a removed
		// pod's log directory.
		klog.FromContext(ctx).V(2).Info("Container's log lies outside the pod logs directory, leaving it to the kubelet's GC",
			"containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "logPath", st.GetLogPath(), "podLogsDirectory", e.paths.PodLogs, "reason", d.Reason)
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "container", ID: c.ID, Why: SkipLogsElsewhere})
		e.keepPod(c.PodUID, c.SandboxID)
		return
	}
	klog.FromContext(ctx).V(4).Info("Removing container", "containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "attempt", c.Attempt, "reason", d.Reason)
	if d.StopFirst || st.GetState() == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		grace := c.GracePeriod
		if grace < 0 {
			grace = defaultGracePeriod
		}
		if err := e.rt.StopContainer(ctx, c.ID, max(grace, minimumGracePeriod)); err != nil {
			e.fail(OpStopContainer, fmt.Errorf("%s in unknown state: %w", who, err), c.PodUID, c.SandboxID)
			return
		}
	}
	// An exited container's logs go first, as the kubelet removes them: if
	// that fails, the container stays and the next run tries both again.
	// Any other container may still be starting (listed as created while
	// its start is in flight, which containerd refuses to remove) or
	// writing: its logs go only once the runtime removed it.
	exited := st.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
	logPath := st.GetLogPath()
	// leaveFiles keeps c's log files, counted as not freed: only its own
	// link goes (removeContainerLogs with no log path).
	leaveFiles := func(why string) {
		if why != "" {
			klog.FromContext(ctx).V(2).Info("Leaving the container's log files: "+why,
				"containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "attempt", c.Attempt, "logPath", logPath)
		}
		logPath, d.LogBytes = "", 0
	}
	if e.sharesLog(c) {
		leaveFiles("a container that stays writes the same ones (the same pod, name and attempt)")
	}
	removeLogs := func() error { return removeContainerLogs(logPath, e.paths.PodLogs, e.paths.ContainerLogs, c) }
	if exited {
		if err := removeLogs(); err != nil {
			e.fail(OpRemoveLogs, err, c.PodUID, c.SandboxID)
			return
		}
	}
	if err := e.rt.RemoveContainer(ctx, c.ID); err != nil {
		e.fail(OpRemoveContainer, fmt.Errorf("%s: %w", who, err), c.PodUID, c.SandboxID)
		return
	}
	kept = false
	if !exited {
		// Its logs go after it, and the kubelet may have made the next
		// instance meanwhile: numbered from the newest by creation time,
		// which, this one gone, may be the one before it, that instance
		// has this one's attempt, and its log file.
		if taken, err := e.attemptTaken(ctx, c); err != nil {
			e.fail(OpRemoveLogs, fmt.Errorf("log files of %s: listing its pod's instances of it: %w", who, err), c.PodUID, "")
			leaveFiles("") // the failure says why
		} else if taken {
			leaveFiles("an instance made since it was removed has its attempt, and writes them")
		}
		if err := removeLogs(); err != nil {
			// The container is gone (its sandbox may go), its logs are
			// not: its pod's log directory waits for the next run.
			e.fail(OpRemoveLogs, err, c.PodUID, "")
			d.LogBytes = 0
		}
	}
	klog.FromContext(ctx).Info("Removed container", "containerID", c.ID, "pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name, "attempt", c.Attempt, "reason", d.Reason)
	e.out.Containers = append(e.out.Containers, d)
}

// logsElsewhere says whether logPath, a container's log path as the
// runtime reports it, lies outside podLogs, the pod logs directory nodegc
// removes log files in (none when podLogs is ""). A path not given, or
// relative, tells nothing.
func logsElsewhere(logPath, podLogs string) bool {
	return podLogs != "" && filepath.IsAbs(logPath) && !within(logPath, podLogs)
}

// changedSincePlanning says whether a container planned in state planned
// and in state now is to be kept for this run: any change but the one from
// unknown to exited (the runtime found the exit of a container it had lost
// track of; the plan counted it as an instance that ran either way).
func changedSincePlanning(planned, now State) bool {
	return planned != now && (planned != StateUnknown || now != StateExited)
}

func (e *executor) sandbox(ctx context.Context, d SandboxDecision) {
	s := &d.Sandbox
	if e.busySandboxes[s.ID] {
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "sandbox", ID: s.ID, Why: SkipSandboxInUse})
		e.failedPods[s.PodUID] = true
		return
	}
	who := fmt.Sprintf("sandbox %s of pod %s/%s", s.ID, s.PodNamespace, s.PodName)
	// StopPodSandbox and RemovePodSandbox succeed for a sandbox that is
	// gone (the kubelet's GC removed it since planning): only its status
	// tells. Removed meanwhile, it is done, and whoever removed it freed
	// its layer.
	st, err := e.rt.PodSandboxStatus(ctx, s.ID)
	switch {
	case cri.IsNotFound(err):
		klog.FromContext(ctx).V(4).Info("Sandbox removed since planning", "sandboxID", s.ID, "pod", klog.KRef(s.PodNamespace, s.PodName))
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "sandbox", ID: s.ID, Why: SkipGone})
		return
	case err != nil:
		e.fail(OpSandboxStatus, fmt.Errorf("%s: %w", who, err), s.PodUID, "")
		return
	}
	// Stopping a sandbox stops every container it holds, and removing it
	// removes them (containerd kills them): one the plan did not see (the
	// containers are listed before the sandboxes) must not go with it. The
	// plan's own went before, so any container left keeps the sandbox.
	left, err := e.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: s.ID})
	if err != nil {
		e.fail(OpSandboxStatus, fmt.Errorf("listing the containers of %s: %w", who, err), s.PodUID, "")
		return
	}
	if st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || len(left) > 0 {
		klog.FromContext(ctx).Info("Sandbox ready or holding containers since planning, keeping it", "sandboxID", s.ID, "pod", klog.KRef(s.PodNamespace, s.PodName),
			"state", st.GetState(), "containers", len(left))
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "sandbox", ID: s.ID, Why: SkipSandboxInUse})
		e.failedPods[s.PodUID] = true
		return
	}
	klog.FromContext(ctx).V(4).Info("Removing sandbox", "sandboxID", s.ID, "pod", klog.KRef(s.PodNamespace, s.PodName), "reason", d.Reason)
	if err := e.rt.StopPodSandbox(ctx, s.ID); err != nil {
		e.fail(OpStopSandbox, fmt.Errorf("%s: %w", who, err), s.PodUID, "")
		return
	}
	if err := e.rt.RemovePodSandbox(ctx, s.ID); err != nil {
		e.fail(OpRemoveSandbox, fmt.Errorf("%s: %w", who, err), s.PodUID, "")
		return
	}
	klog.FromContext(ctx).Info("Removed sandbox", "sandboxID", s.ID, "pod", klog.KRef(s.PodNamespace, s.PodName), "reason", d.Reason)
	e.out.Sandboxes = append(e.out.Sandboxes, d)
}

func (e *executor) logDir(ctx context.Context, d LogDirDecision) {
	if e.failedPods[d.Dir.PodUID] {
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_dir", ID: d.Dir.Name, Why: SkipPodFailed})
		return
	}
	if !plainName(d.Dir.Name) || e.paths.PodLogs == "" {
		e.fail(OpRemoveLogDir, fmt.Errorf("pod log directory %q: not a directory name under %q", d.Dir.Name, e.paths.PodLogs), "", "")
		return
	}
	dir := filepath.Join(e.paths.PodLogs, d.Dir.Name)
	// os.RemoveAll succeeds for a directory that is gone (removed by the
	// kubelet since planning): it frees nothing of nodegc's doing.
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		klog.FromContext(ctx).V(4).Info("Pod log directory removed since planning", "directory", d.Dir.Name, "podUID", d.Dir.PodUID)
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_dir", ID: d.Dir.Name, Why: SkipGone})
		return
	}
	klog.FromContext(ctx).V(4).Info("Removing pod log directory", "directory", d.Dir.Name, "podUID", d.Dir.PodUID, "reason", d.Reason)
	// What it holds now is what its removal frees, counted now rather than
	// as planned: the log files of the containers removed before went with
	// them (and counted there), while those of a container another removed
	// since planning (skipped as gone) may still be here, counted nowhere
	// else. What cannot be read counts 0.
	n, err := treeBytes(dir, nil)
	if err != nil {
		e.out.Failures[OpReadBytes]++
		klog.FromContext(ctx).V(2).Info("Cannot read all of a pod log directory; counting what could be read", "directory", d.Dir.Name, "err", err)
	}
	d.Bytes = n
	if err := os.RemoveAll(dir); err != nil {
		e.fail(OpRemoveLogDir, fmt.Errorf("removing pod log directory %s: %w", d.Dir.Name, err), "", "")
		return
	}
	klog.FromContext(ctx).Info("Removed pod log directory", "directory", d.Dir.Name, "podUID", d.Dir.PodUID, "reason", d.Reason)
	e.out.LogDirs = append(e.out.LogDirs, d)
}

func (e *executor) logLink(ctx context.Context, d LogLinkDecision) {
	if !plainName(d.Link.Name) || e.paths.ContainerLogs == "" {
		e.fail(OpRemoveLogLink, fmt.Errorf("log link %q: not a file name under %q", d.Link.Name, e.paths.ContainerLogs), "", "")
		return
	}
	path := filepath.Join(e.paths.ContainerLogs, d.Link.Name)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_link", ID: d.Link.Name, Why: SkipGone}) // the kubelet removed it since the plan
		return
	}
	// Dangling when planned, maybe not now: the kubelet renames a log to
	// rotate it, then opens a new one, which the link points at again.
	st := readLink(path, e.paths.PodLogs)
	if !st.dangles {
		klog.FromContext(ctx).V(4).Info("Container log link points at a log again; kept", "link", d.Link.Name)
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_link", ID: d.Link.Name, Why: SkipPointsAgain})
		return
	}
	if linkOfLiveContainer(d.Link.ContainerID, e.linkContainers) || logOfLiveContainer(st.log, e.linkContainers) {
		klog.FromContext(ctx).V(2).Info("Container log link names a container that has not exited since planning; kept", "link", d.Link.Name, "containerID", d.Link.ContainerID)
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_link", ID: d.Link.Name, Why: SkipStarted})
		return
	}
	klog.FromContext(ctx).V(4).Info("Removing dangling container log link", "link", d.Link.Name, "containerID", d.Link.ContainerID)
	switch err := os.Remove(path); {
	case errors.Is(err, fs.ErrNotExist):
		e.out.Skipped = append(e.out.Skipped, Skip{Kind: "log_link", ID: d.Link.Name, Why: SkipGone})
		return
	case err != nil:
		e.fail(OpRemoveLogLink, fmt.Errorf("removing log link %s: %w", d.Link.Name, err), "", "")
		return
	}
	e.out.LogLinks = append(e.out.LogLinks, d)
}
