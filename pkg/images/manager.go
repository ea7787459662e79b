package images

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/clockstep"
	"github.com/nodegc/nodegc/internal/gcrun"
	"github.com/nodegc/nodegc/internal/imageref"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/cri"
	"github.com/nodegc/nodegc/pkg/diskstats"
)

// RuntimeService is what the image GC needs of the container runtime: a
// *cri.Client (pkg/cri) is one.
type RuntimeService interface {
	ListImages(ctx context.Context) ([]*runtimeapi.Image, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error)
	RemoveImage(ctx context.Context, id string) error
	WatchContainerEvents(ctx context.Context, connected func(), handle func(*runtimeapi.ContainerEventResponse)) error
}

var _ RuntimeService = (*cri.Client)(nil)

// ImageLookup is what the check right before each removal asks, when the
// runtime offers it, of the image planned for removal: whether the runtime
// still has it (nil when not). The runtime answers the removal of an image
// it does not have with success, so without it an image another removed
// since the plan (the kubelet's eviction manager, `crictl rmi`) counts as
// removed by nodegc, its bytes as freed. A *cri.Client is one.
type ImageLookup interface {
	ImageStatus(ctx context.Context, id string) (*runtimeapi.Image, error)
}

var _ ImageLookup = (*cri.Client)(nil)

// LayerSource tells what storage each image holds, for exact accounting of
// shared layers, and which of it something other than the images holds
// (Held: removing images cannot free it); Forget drops what it keeps of an
// image the GC removed, and Retain what it keeps of every image but those
// listed (by ID). Each plan reads Held, then Layers of every image:
// *ContainerdLayers, which is one, checks what it cached of each image
// against which storage containerd had at that read of Held.
type LayerSource interface {
	Layers(ctx context.Context, img *Image) ([]Layer, error)
	Held(ctx context.Context) (map[unique.Handle[string]]bool, error)
	Forget(imageID string)
	Retain(imageIDs map[string]bool)
}

var _ LayerSource = (*ContainerdLayers)(nil)

// ArrivalSource tells when images arrived on the node; *ContainerdLayers
// is one.
type ArrivalSource interface {
	Arrivals(ctx context.Context, images []*runtimeapi.Image) (map[string]time.Time, error)
}

var _ ArrivalSource = (*ContainerdLayers)(nil)

// WriteSource tells of writes to the image filesystem as the runtime makes
// them; *ContainerdLayers is one (WatchWrites).
type WriteSource interface {
	// WatchWrites calls wrote after writes, until ctx ends (nil) or the
	// stream breaks (its error); opened once it follows them.
	WatchWrites(ctx context.Context, opened, wrote func()) error
}

var _ WriteSource = (*ContainerdLayers)(nil)

// SandboxSource names the images the runtime's pod sandboxes run, in any
// state; *ContainerdLayers is one.
type SandboxSource interface {
	SandboxImages(ctx context.Context) ([]string, error)
}

var _ SandboxSource = (*ContainerdLayers)(nil)

// ContainerRecordSource tells which images the runtime's own records of
// containers were made from, those of the containers CRI lists and those
// of the ones it does not (ContainerdLayers.ContainerRecords);
// *ContainerdLayers is one.
type ContainerRecordSource interface {
	ContainerRecords(ctx context.Context) (ContainerRecords, error)
	// TopLayer names the layer of img a container's root filesystem is
	// made on, as ContainerRecords.Layers names them ("" for none). An
	// error that is img's own, the runtime answering, wraps
	// ErrImageUnreadable.
	TopLayer(ctx context.Context, img *Image) (string, error)
}

// ErrImageUnreadable is wrapped by the error of a read of one image's
// storage (TopLayer, LayerSource.Layers) that is the image's own: the
// runtime answers, and cannot read what the image holds (containerd: a
// manifest or config blob gone from its content store, by corruption or
// `ctr content rm`; an image record gone while the CRI plugin still lists
// the image). A plan keeps such an image (KeepUnreadable) and goes on
// with the others; a runtime that cannot be asked still fails it.
var ErrImageUnreadable = errors.New("what the image holds cannot be read")

var _ ContainerRecordSource = (*ContainerdLayers)(nil)

// ContainerRecords is what the runtime's records of containers say of the
// images they were made from.
type ContainerRecords struct {
	// Images name the images as the records give them (a reference in
	// any form, or an ID).
	Images []string
	// Layers are the image layers the records' root filesystems were made
	// on (ContainerRecordSource.TopLayer): an image's top layer is one
	// when a record was made from it, whatever name the record gives.
	Layers map[string]bool
}

// Connection numbers the runtime's connections: Generation is one more
// after each loss of the connection. A *cri.Client is one; a Runtime that
// is one has the manager hold removals after a loss (see
// Options.ProfileGeneration).
type Connection interface {
	Generation() uint64
}

var _ Connection = (*cri.Client)(nil)

// ErrRemovalsHeld is in the error of a run that removed nothing because
// what the manager was built for may not hold: the connection to the
// runtime was lost since it was read (Options.ProfileGeneration), or part
// of it could not be read (Options.ProfileUnread).
var ErrRemovalsHeld = errors.New("image removals held")

// DiskReader reads the statistics of the filesystem holding a path; a
// *diskstats.Reader (pkg/diskstats) is one.
type DiskReader interface {
	Stat(path string) (diskstats.Stats, error)
}

var _ DiskReader = (*diskstats.Reader)(nil)

// ErrRunInProgress is returned by GarbageCollect while another run is going
// on. It is the error both node collectors return (errors.Is works with
// either package's).
var ErrRunInProgress = gcrun.ErrInProgress

var errPlanOnly = errors.New("image GC: this manager only plans (Options.PlanOnly)")

const (
	usageFromEvents  = "events"
	usageFromPolling = "polling"
)

// Options configure a Manager.
type Options struct {
	Config         config.ImageGCConfiguration
	StateDirectory string
	// NodeName is the node the state file describes: one written for
	// another node (a disk cloned from a template node) is set aside.
	// Empty reads any.
	NodeName string
	// BootID is this machine's boot ID (/proc/sys/kernel/random/boot_id).
	// With the real clock, the state file records it and the time since
	// boot at each write, so that a step of the wall clock while nodegc
	// was down, on the same boot, moves the records (stepWhileDown).
	// Empty: not done.
	BootID string
	// bootClock reads the time since boot for BootID's records; nil means
	// CLOCK_BOOTTIME (timeSinceBoot). Tests fake it, so that what they
	// prove does not depend on how long the machine has been up.
	bootClock func() (time.Duration, bool)
	Runtime   RuntimeService
	// Layers, if set, gives exact accounting; nil means CRI sizes.
	Layers LayerSource
	// Arrivals, if set, bounds first-detected times by when the runtime
	// says each image arrived (an image removed and pulled again while
	// nodegc was down is young again); nil means nodegc's records alone.
	Arrivals ArrivalSource
	// Writes, if set, has the disk read at once when the runtime
	// committed a write to its storage (a pull's blob or layer, an image
	// record), besides every diskCheckInterval: a pull of several layers
	// faster than the interval crosses the high threshold with the GC
	// looking. What a blob's download or a layer's unpack writes before
	// its commit is seen at the commit, or at the next interval check.
	Writes WriteSource
	Disk   DiskReader
	Clock  clock.WithTicker
	// Registerer receives the image GC metrics; nil means none are exported.
	Registerer prometheus.Registerer
	// SandboxImages name the runtime's sandbox image as its config writes
	// it (a reference in any form, or an ID).
	SandboxImages []string
	// ProfileGeneration is the generation of the runtime's connection
	// (Connection) on which SandboxImages and the rest of what the
	// manager is built for were read. Where the Runtime is a Connection,
	// no image is removed while its generation differs from the one
	// confirmed last (this, then ConfirmProfile's): a runtime restarted
	// with another sandbox image in its config is read again first.
	ProfileGeneration uint64
	// ProfileUnread, if set, names what the manager relies on that the
	// runtime could not be asked for (its sandbox image, on a runtime that
	// reports one): the manager plans, but removes no image (the check
	// before each removal fails with ErrRemovalsHeld).
	ProfileUnread string
	// Sandboxes, if set, names the images of the pod sandboxes the runtime
	// holds: they are kept as the sandbox image, and checked again before
	// each removal. A plan fails when it cannot be asked.
	Sandboxes SandboxSource
	// ContainerRecords, if set, lists the runtime's own records of
	// containers, of which CRI lists only some (containerd: not those made
	// through its own API in the CRI plugin's namespace, nor one the CRI
	// plugin failed to load): an image one of them names, or whose top
	// layer one's root filesystem was made on, is in use (KeepInUse), at
	// the plan and at the check before each removal. A plan or a check
	// fails when they cannot be listed.
	ContainerRecords ContainerRecordSource
	// SettleTimeout bounds the wait for the runtime's asynchronous cleanup
	// before freed space is measured. Default 20s.
	SettleTimeout time.Duration
	// OnRun, if set, receives the report of every run.
	OnRun func(*Report)
	// Supervise, if set, runs each iteration of Run's loop (a disk check
	// or a periodic sweep): it calls work once, with ctx or a context
	// derived from it, and returns when work does. The agent's watchdog
	// uses it to tell a wedged loop from a slow one.
	Supervise func(ctx context.Context, work func(context.Context))
	// Pods, if set, names the images of the pods bound to this node that
	// have not finished: they are kept (KeepScheduled). Nil (no API
	// access) turns that rule off.
	Pods PodImageSource
	// PodsMemory, if set, is where the manager remembers the last
	// authoritative view of Pods (when, and its images), so that a manager
	// built again (for a runtime upgraded in place) goes on from it: while
	// the view is not authoritative, one that forgot it keeps every image
	// not in use. Nil: the manager's own.
	PodsMemory *PodsMemory
	// PlanOnly makes a manager that only plans (`nodegc plan`): it writes
	// nothing to the state directory, leaves a corrupt state file where it
	// is, and refuses to collect.
	PlanOnly bool
	// WatchGoesOn, with PlanOnly, says an agent runs on the state
	// directory now: the plan takes the watch its state file records as
	// going on (the agent writes only on changes). Else the plan counts
	// the watch as an agent starting now would.
	WatchGoesOn bool
}

// Report describes one GC run: what every node collector reports of a run
// (trigger, start, duration, error), and the image GC's own.
type Report struct {
	gcrun.Run
	Plan    *Plan
	Outcome *Outcome
	// Before and After are the image filesystem before planning and after
	// the runtime's cleanup settled.
	Before, After DiskStats
	// MeasuredFreed is After.Available - Before.Available, when Measured.
	MeasuredFreed int64
	Measured      bool
}

// Manager runs the image GC for one node: usage tracking, the fast disk
// check, the periodic sweep, and GC runs, never two at once.
type Manager struct {
	opts    Options
	policy  *Policy
	tracker *Tracker
	metrics *metrics
	clock   clock.WithTicker
	// waitClock times waits for the real runtime (the cleanup after
	// removals), which take real time whatever clock decides ages;
	// checkClock, as real, how long the check's last reads took.
	waitClock  clock.Clock
	checkClock clock.PassiveClock

	serial     *gcrun.Serial // one GC run at a time
	guard      *guardian
	scheduled  *PodsMemory
	volumes    volumeMounts
	eventsLive atomic.Bool
	// confirmed is the generation of the runtime's connection on which
	// what the manager is built for was last confirmed (ConfirmProfile).
	confirmed atomic.Uint64
	// listedAt is when the last container listing that succeeded began,
	// imagesListedAt the last image listing.
	listedAt       atomic.Pointer[time.Time]
	imagesListedAt atomic.Pointer[time.Time]
	mountpoint     atomic.Pointer[string]
	layersWarn     sync.Once
	unreadable     unreadableImages
	diskReads      readStreak // the disk checks' failures, for their logs
	// The failures of the reads of containerd's own API that the plan
	// goes on without, for their logs.
	// checkArrivalReads is the check's own: its one-image lookups and the
	// plans' listings of containerd's images can fail apart.
	arrivalReads, heldReads, checkArrivalReads readStreak
	// idFaults follows the listings and events that gave containers no ID
	// of their own, for their logs.
	idFaults readStreak
	// feedback holds space removals while they free nothing on the image
	// filesystem as nodegc reads it.
	feedback diskFeedback
	// unreadTold logs once that threshold runs wait for the runtime's
	// configuration (Options.ProfileUnread).
	unreadTold sync.Once
}

// NewManager validates opts.Config (defaulted: config.SetDefaults) with
// config.ValidateImageGC, loads the durable state and returns a manager. A
// corrupt state file is set aside and logged, not fatal.
func NewManager(opts Options) (*Manager, error) {
	if errs := config.ValidateImageGC(&opts.Config); len(errs) > 0 {
		return nil, fmt.Errorf("image GC: %w", errs.ToAggregate())
	}
	if opts.Runtime == nil || opts.Disk == nil {
		return nil, errors.New("image GC: Runtime and Disk are required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.SettleTimeout <= 0 {
		opts.SettleTimeout = 20 * time.Second
	}
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	start := opts.Clock.Now()
	// Only the real clock is stepped, and reads with the monotonic and
	// boot clocks; a fake clock's time is the only time.
	_, realClock := opts.Clock.(clock.RealClock)
	var boot func() bootReading
	if realClock && opts.BootID != "" {
		readBoot := opts.bootClock
		if readBoot == nil {
			readBoot = timeSinceBoot
		}
		boot = func() bootReading {
			since, ok := readBoot()
			if !ok {
				return bootReading{}
			}
			return bootReading{id: opts.BootID, since: since}
		}
	}
	tracker, warn := newTrackerAt(opts.StateDirectory, start, opts.PlanOnly, opts.NodeName, boot)
	tracker.clock = opts.Clock.Now
	if opts.PlanOnly && opts.WatchGoesOn && !tracker.fileWatch.since.IsZero() && !tracker.fileWatch.since.After(start) {
		// The agent that runs writes on changes only: its watch goes
		// on, however long ago its last write.
		tracker.watchedSince = tracker.fileWatch.since
	}
	if maxAge := opts.Config.MaximumGCAge; maxAge != nil && maxAge.Duration > 0 && tracker.watchedSince.Equal(start) && len(tracker.usage) > 0 {
		klog.Background().Info("Image GC begins a new watch of the node's containers (its last one ended more than a minute ago, or is not on record): a use meanwhile is unknown, so maximumGCAge counts from now",
			"maximumGCAge", maxAge.Duration, "watchGapCovered", watchGapCovered)
	}
	switch {
	case errors.Is(warn, errDatedAhead):
		klog.Background().Info("Image GC state has times after the clock's; those count from now", "err", warn)
	case warn != nil && opts.PlanOnly:
		klog.Background().Info("Image GC state is unusable; planning without first-detected and last-used times", "err", warn)
	case warn != nil:
		klog.Background().Info("Image GC state was unusable; first-detected and last-used times start over (the error says where the file was set aside, or why it could not be)", "err", warn)
	}
	if opts.Layers == nil {
		klog.Background().Info("Image GC uses CRI image sizes: shared layers are counted once per image, and on containerd only the compressed content (not the unpacked layers) is, so freed-byte estimates may be off either way")
	}
	policy := NewPolicy(opts.Config)
	metrics := newMetrics(reg)
	if d := (*stateDiscarded)(nil); errors.As(warn, &d) && !opts.PlanOnly {
		metrics.stateDiscarded.WithLabelValues(d.reason).Inc()
	}
	metrics.setThresholds(policy.highThresholdPercent(), policy.lowThresholdPercent())
	memory := opts.PodsMemory
	if memory == nil {
		memory = &PodsMemory{}
	}
	m := &Manager{opts: opts, policy: policy, tracker: tracker, metrics: metrics, clock: opts.Clock,
		waitClock: clock.RealClock{}, checkClock: clock.RealClock{}, serial: gcrun.NewSerial(opts.Clock), guard: newGuardian(policy), scheduled: memory}
	m.confirmed.Store(opts.ProfileGeneration)
	if opts.ProfileUnread != "" {
		metrics.removalsHeld.WithLabelValues(heldProfileUnread).Set(1)
		klog.Background().Info("Image GC removes no image until it can read what it relies on of the runtime", "unread", opts.ProfileUnread)
	}
	if realClock {
		tracker.steps.Monotonic = clockstep.Since(time.Now())
	}
	tracker.onStep = m.clockStepped
	tracker.onFaults = m.containerIDFaults
	if step := tracker.fileWatch.shift; step != 0 {
		memory.steppedBack(step) // a memory kept from a manager before this one
		metrics.clockSteps.Inc()
		klog.Background().Info("Warning: the wall clock was stepped while nodegc was down; the image usage records move with it, so that images keep their ages",
			"step", step.Round(time.Millisecond))
	}
	return m, nil
}

// ConfirmProfile says what the manager was built for (SandboxImages above
// all) still holds on generation of the runtime's connection: read again
// on it, nothing changed. Removals held since a loss of the connection
// before it go on. A generation older than one confirmed before changes
// nothing.
func (m *Manager) ConfirmProfile(generation uint64) {
	for {
		was := m.confirmed.Load()
		if generation <= was || m.confirmed.CompareAndSwap(was, generation) {
			break
		}
	}
	if c, ok := m.opts.Runtime.(Connection); ok && c.Generation() == m.confirmed.Load() {
		m.metrics.removalsHeld.WithLabelValues(heldReconnected).Set(0)
	}
}

// removalsHeld returns an error (ErrRemovalsHeld) when what the manager was
// built for may not hold, so that it removes nothing: the connection to
// the runtime was lost since it was confirmed (the runtime may have
// restarted with another config), or part of it could not be read.
func (m *Manager) removalsHeld() error {
	if m.opts.ProfileUnread != "" {
		return fmt.Errorf("%w: the runtime's %s could not be read; it is asked again every 30s", ErrRemovalsHeld, m.opts.ProfileUnread)
	}
	c, ok := m.opts.Runtime.(Connection)
	if !ok {
		return nil
	}
	if g, confirmed := c.Generation(), m.confirmed.Load(); g != confirmed {
		m.metrics.removalsHeld.WithLabelValues(heldReconnected).Set(1)
		return fmt.Errorf("%w: the connection to the runtime was lost since its configuration was read (it may have restarted with another sandbox image); waiting for it to be read again", ErrRemovalsHeld)
	}
	m.metrics.removalsHeld.WithLabelValues(heldReconnected).Set(0)
	return nil
}

// Tracker returns the manager's usage tracker.
func (m *Manager) Tracker() *Tracker { return m.tracker }

// Run runs the image GC until ctx ends: it keeps usage current (polling
// the containers, or, with Config.ContainerEvents, container events where
// the runtime has an event stream), checks the disk
// every diskCheckInterval and collects at once when usage reaches the high
// threshold, and sweeps every period. It blocks, and saves the state before
// returning.
func (m *Manager) Run(ctx context.Context) error {
	if m.opts.PlanOnly {
		return errPlanOnly
	}
	var wg sync.WaitGroup
	wg.Go(func() { m.watchUsage(ctx) })
	wg.Go(func() { m.saveChanges(ctx) })
	wrote := make(chan struct{}, 1)
	if m.opts.Writes != nil {
		wg.Go(func() { m.watchWrites(ctx, wrote) })
	}
	defer func() {
		wg.Wait()
		if err := m.saveState(true); err != nil {
			klog.FromContext(ctx).Error(err, "Saving image GC state at shutdown")
		}
	}()

	fast := m.clock.NewTicker(m.opts.Config.DiskCheckInterval.Duration)
	defer fast.Stop()
	sweep := m.clock.NewTicker(m.opts.Config.Period.Duration)
	defer sweep.Stop()
	// One loop for both tickers, not gcrun.Every per ticker: a threshold
	// check never overlaps a sweep (it would be skipped, and back off), and
	// the first sweep waits a period.
	supervise := gcrun.Supervisor(m.opts.Supervise)
	var (
		backoff   thresholdBackoff
		lastCheck time.Time
		soon      <-chan time.Time // a check the runtime's writes asked for, spaced
	)
	check := func(cause string) {
		// A clock step is applied within a check interval, also while
		// nothing dates or reads the records (Tracker.follow).
		m.tracker.follow()
		lastCheck = m.clock.Now()
		m.metrics.diskChecks.WithLabelValues(cause).Inc()
		supervise.Call(ctx, func(ctx context.Context) { m.checkDisk(ctx, &backoff, cause) })
	}
	check(checkAtInterval)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-fast.C():
			check(checkAtInterval)
		case <-wrote:
			// Writes come in bursts (a pull's blobs and layers): one
			// check per writeCheckSpacing at most, the last write of a
			// burst always followed by one.
			if soon != nil {
				continue
			}
			if wait := lastCheck.Add(writeCheckSpacing).Sub(m.clock.Now()); wait > 0 {
				soon = m.clock.After(wait)
				continue
			}
			check(checkAfterWrite)
		case <-soon:
			soon = nil
			check(checkAfterWrite)
		case <-sweep.C():
			supervise.Call(ctx, func(ctx context.Context) { _, _ = m.collectAndLog(ctx, TriggerPeriodic, demand{}) })
		}
	}
}

// thresholdBackoff is the disk check's memory of an episode over the high
// threshold. Once usage reached it, the checks collect down to the low
// threshold: at or over high, and between the thresholds too (toLow), where
// pulls beside a run can leave usage, until usage is down to low or a run
// between the thresholds removes nothing (what is left stays). The runs
// that removed nothing while usage stayed over the high threshold, or near
// the kubelet's eviction threshold (what is left is in use, pinned or
// young), are spaced out: the next one waits twice as long, up to the sweep
// period. A run that removed images is followed by another at the next
// check that calls for one: the disk fills faster than one run frees it,
// and there is more to remove. The backoff ends when usage is back under
// the low threshold with no run called for: a later crossing is met at
// once, however long the last episode lasted. Between the thresholds it
// goes on, so usage that hovers around the high threshold with nothing to
// remove does not run (and post FreeDiskSpaceFailed) at every check. An
// image that lost its last container since the last run that removed
// nothing ends the backoff (no sooner than releaseRunSpacing after that
// run): it may be removable now, and the disk need not wait minutes for
// it.
type thresholdBackoff struct {
	next  time.Time
	delay time.Duration
	toLow bool
	// ran is when the last run that removed nothing began, and used the
	// images containers used then (Tracker.usedIDs): one of them released
	// since may have become removable, and ends the backoff (at most every
	// releaseRunSpacing).
	ran  time.Time
	used map[string]bool
	// failDelay spaces the retries of runs that failed (failedRun), up to
	// failedRunRetryMax; it does not touch delay.
	failDelay time.Duration
}

// releaseRunSpacing is the least time between two runs that an image
// released ends a backoff for: a node whose containers come and go at every
// check, over the high threshold with what they release still kept (young,
// pinned), runs no more often than that.
const releaseRunSpacing = 30 * time.Second

// failedRunRetryMax bounds the spacing of threshold runs that failed
// because the runtime could not be reached: once it answers again, a run
// comes within it.
const failedRunRetryMax = 10 * time.Second

// failedRun says whether a run ended in an error that tells nothing of what
// is removable: not one that found too little (FreeDiskSpaceError), nor
// one skipped for another in progress or ended by ctx.
func failedRun(ctx context.Context, err error) bool {
	var notEnough *FreeDiskSpaceError
	return err != nil && ctx.Err() == nil && !errors.As(err, &notEnough) && !errors.Is(err, ErrRunInProgress)
}

// due says whether a run may start at now, for a check on a grid of that
// step (the check ticker's interval, or the write spacing for the checks
// writes ask for, which come at any moment). next is counted from the start
// of the check that ran last; a tick fires a little early or late against
// it, so one that comes within half a step of next is due (else a run that
// took a few milliseconds would push every later run a whole tick back).
func (b *thresholdBackoff) due(now time.Time, step time.Duration) bool {
	return !now.Add(step / 2).Before(b.next)
}

// checkDisk reads the image filesystem and collects at once when usage
// reached the high threshold (TriggerThreshold) or, at the rate it fills,
// would reach the kubelet's eviction threshold within fillRateHorizon
// (TriggerProjected); cause says why it reads (checkAtInterval,
// checkAfterWrite).
func (m *Manager) checkDisk(ctx context.Context, b *thresholdBackoff, cause string) {
	logger := klog.FromContext(ctx)
	start := m.clock.Now()
	disk, err := m.diskStats(ctx)
	if err != nil {
		m.metrics.diskCheckErrors.Inc()
		if since, log := m.diskReads.failed(start); log {
			logger.Error(err, "Image filesystem cannot be read: no threshold run starts until it can (the periodic run still tries)",
				"failingFor", start.Sub(since).Round(time.Second))
		} else {
			logger.V(4).Info("Image filesystem still cannot be read", "err", err)
		}
		return
	}
	if since, was := m.diskReads.succeeded(); was {
		logger.Info("Image filesystem can be read again", "failedFor", start.Sub(since).Round(time.Second))
	}
	m.observeDisk(ctx, disk)
	if msg := m.guard.evictionWarning(disk); msg != "" {
		logger.Info("Warning: the kubelet may evict pods before image GC starts", "problem", msg)
	}
	interval := m.opts.Config.DiskCheckInterval.Duration
	trigger, ahead := m.diskTrigger(disk)
	low := m.policy.lowThresholdPercent()
	underLow := disk.UsagePercent() < low
	switch {
	case trigger == TriggerThreshold:
		b.toLow = true
	case disk.UsagePercent() <= low: // the goal a run plans for: at low
		b.toLow = false
	}
	goingOn := trigger == "" && b.toLow
	if goingOn {
		trigger = TriggerThreshold
	}
	if trigger == "" {
		if b.delay > 0 && underLow {
			*b = thresholdBackoff{}
		}
		return
	}
	// A check on the ticker's grid may come early by half an interval; one
	// a write asked for comes at any moment, within a write spacing.
	grid := interval
	if cause == checkAfterWrite {
		grid = writeCheckSpacing
	}
	if b.delay > 0 && !b.due(start, grid) && start.Sub(b.ran) >= releaseRunSpacing {
		if m.tracker.releasedSince(b.used) {
			logger.Info("An image lost its last container since the last run that could not relieve the disk; collecting now rather than backing off",
				"trigger", trigger, "usagePercent", disk.UsagePercent(), "backoff", b.delay)
			b.next = start
		}
	}
	if m.opts.ProfileUnread != "" {
		// Every run would plan in full and fail at its first check: this
		// manager removes nothing for good, and the agent builds another
		// once it reads what is missing (asked again every 30s). The
		// periodic run still plans, for the metrics and the log.
		m.unreadTold.Do(func() {
			logger.Info("Image filesystem calls for a run, but image removals are held until the runtime's configuration can be read: no threshold or projected run starts meanwhile; the image GC is built again once it is",
				"unread", m.opts.ProfileUnread, "trigger", trigger, "usagePercent", disk.UsagePercent())
		})
		return
	}
	if m.feedback.holding() {
		logger.V(4).Info("Image filesystem calls for a run, but removals free nothing on it as nodegc reads it: held",
			"trigger", trigger, "usagePercent", disk.UsagePercent())
		return
	}
	if !b.due(start, grid) {
		logger.V(4).Info("Image filesystem still calls for a run, waiting: the last one could not relieve it",
			"trigger", trigger, "usagePercent", disk.UsagePercent(), "aheadBytes", ahead, "backoff", b.delay, "runIn", b.next.Sub(start).Round(time.Millisecond))
		return
	}
	switch {
	case goingOn:
		logger.Info("Image filesystem usage is still over the low threshold since it reached the high one, collecting now",
			"usagePercent", disk.UsagePercent(), "lowThresholdPercent", low, "aheadBytes", ahead)
	case trigger == TriggerThreshold:
		logger.Info("Image filesystem usage reached the high threshold, collecting now",
			"usagePercent", disk.UsagePercent(), "highThresholdPercent", m.policy.highThresholdPercent(), "aheadBytes", ahead)
	default:
		logger.Info("Image filesystem fills fast enough to reach the kubelet's eviction threshold soon, collecting now",
			"usagePercent", disk.UsagePercent(), "fillBytesPerSecond", int64(m.guard.fillRate()), "horizon", m.policy.fillRateHorizon(), "aheadBytes", ahead)
	}
	usedBefore := m.tracker.usedIDs() // what the run's plan saw used at the latest
	removed, runErr := m.collectAndLog(ctx, trigger, demand{ahead: ahead, toLow: b.toLow})
	if m.feedback.holding() {
		// What it removed freed nothing on the disk read: a run that
		// relieved nothing, not one to follow at the next check.
		removed = 0
	}
	if removed == 0 && failedRun(ctx, runErr) {
		// The run failed (the runtime is down or restarting, a check
		// could not be made): what is removable is unknown. It is tried
		// again, spaced so that a failure that lasts is not met (and
		// logged) every second; the backoff of runs that found nothing to
		// remove stays as it was. While the runtime cannot be reached the
		// spacing stays within failedRunRetryMax, so that a run comes
		// soon once it answers; another failure, which the runtime may
		// give at every run, is spaced up to the period.
		limit := m.opts.Config.Period.Duration
		if cri.HasCode(runErr, codes.Unavailable) || cri.HasCode(runErr, codes.DeadlineExceeded) || errors.Is(runErr, ErrRemovalsHeld) {
			limit = min(limit, failedRunRetryMax)
		}
		b.failDelay = min(max(2*b.failDelay, interval), limit)
		b.next = start.Add(b.failDelay)
		return
	}
	b.failDelay = 0
	after, err := m.diskStats(ctx)
	if err == nil {
		m.observeDisk(ctx, after)
		if t, _ := m.diskTrigger(after); removed == 0 && (t != "" || goingOn) {
			// The run could not relieve the disk: the next one waits. Between
			// the thresholds, the episode's runs toward low end with it
			// (what is left stays), until usage reaches high again.
			b.delay = min(max(2*b.delay, interval), m.opts.Config.Period.Duration)
			b.next = start.Add(b.delay)
			b.ran, b.used = start, usedBefore
			b.toLow = b.toLow && !goingOn
			return
		}
	}
	// The episode goes on after a run that removed images while usage is
	// over low.
	*b = thresholdBackoff{toLow: b.toLow && removed > 0 && (err != nil || after.UsagePercent() > low)}
}

// containerIDFaults is told of each container listing and event (source)
// that gave containers no ID of their own (Tracker.onFaults; called with the
// tracker's lock held): it counts them, and logs the first and one a minute
// after. The tracker keeps each such container all the same, so that it
// keeps its image, and where the runtime gives container statuses no image
// is removed while it knows one (containerIDs).
func (m *Manager) containerIDFaults(source string, f idFaults) {
	m.metrics.containerIDFaults.WithLabelValues(source).Inc()
	if _, log := m.idFaults.failed(m.clock.Now()); log {
		klog.Background().Info("Warning: the runtime gives containers no ID of their own; each keeps its image all the same",
			"source", source, "containers", f.String())
	}
}

// readStreak follows the failures of one kind of reading (the disk
// checks', containerd's arrivals or held storage), for their logs: the
// first of a streak and one a minute after, and the recovery.
type readStreak struct {
	mu            sync.Mutex
	since, logged time.Time // zero since: not failing
}

// readLogEvery spaces the logs of a reading that keeps failing.
const readLogEvery = time.Minute

// tellRead counts a failed read of containerd's own API that the plan goes
// on without (nodegc_image_gc_containerd_read_errors_total{read}) and logs
// it, failing, with kv when err is one (the first of a streak, then once a
// minute; streak follows them), and again once a read works again.
func (m *Manager) tellRead(ctx context.Context, read string, streak *readStreak, now time.Time, err error, failing, again string, kv ...any) {
	logger := klog.FromContext(ctx)
	if err == nil {
		if since, was := streak.succeeded(); was {
			logger.Info(again, "failedFor", now.Sub(since).Round(time.Second))
		}
		return
	}
	m.metrics.containerdReadErrors.WithLabelValues(read).Inc()
	if since, log := streak.failed(now); log {
		logger.Info(failing, append([]any{"err", err, "failingFor", now.Sub(since).Round(time.Second)}, kv...)...)
	}
}

// failed records a failed reading at now, and returns when the streak
// began and whether to log this one.
func (d *readStreak) failed(now time.Time) (since time.Time, log bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.since.IsZero() {
		d.since = now
	}
	if log = d.logged.IsZero() || now.Sub(d.logged) >= readLogEvery; log {
		d.logged = now
	}
	return d.since, log
}

// succeeded records a reading that worked, and returns when the streak it
// ends began, if one did.
func (d *readStreak) succeeded() (since time.Time, ended bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	since, ended = d.since, !d.since.IsZero()
	d.since, d.logged = time.Time{}, time.Time{}
	return since, ended
}

// diskTrigger says whether the disk calls for a run now, and how many
// bytes the fill rate says will arrive within the horizon when the
// kubelet's eviction threshold is near (0 otherwise).
func (m *Manager) diskTrigger(disk DiskStats) (trigger string, ahead uint64) {
	ahead = m.guard.ahead(disk)
	switch {
	case m.policy.overHighThreshold(disk):
		return TriggerThreshold, ahead
	case ahead > 0:
		return TriggerProjected, ahead
	}
	return "", 0
}

// observeDisk records a reading of the image filesystem: the gauges, the
// fill rate, the reaction histogram, and whether the filesystem answers
// again after its space removals were held (diskFeedback).
func (m *Manager) observeDisk(ctx context.Context, disk DiskStats) {
	m.metrics.observeDisk(disk)
	if m.feedback.observe(disk) {
		m.metrics.diskUnresponsive.Set(0)
		klog.FromContext(ctx).Info("Image filesystem as nodegc reads it grew since its space removals were held: removing for space again",
			"availableBytes", disk.Available)
	}
	evictAt, which, ok := m.policy.cfg.DiskEviction(disk.Capacity)
	m.metrics.observeEviction(disk.Capacity, evictAt, which.Threshold, ok)
	if r := m.guard.observe(m.clock.Now(), disk); r.belowLow > 0 {
		m.metrics.reaction.WithLabelValues(phaseBelowLow).Observe(r.belowLow.Seconds())
	}
}

// collectAndLog runs the GC once and logs how it ended (gcrun.LogEnd), or
// what it removed; it returns how many images the run removed (none in a
// dry run).
func (m *Manager) collectAndLog(ctx context.Context, trigger string, d demand) (removed int, err error) {
	r, err := m.collectFor(ctx, trigger, d)
	var done []any // what the run did despite the error
	if r != nil && r.Outcome != nil {
		o := r.Outcome
		if !o.DryRun {
			removed = len(o.Removed)
		}
		done = []any{"removed", len(o.Removed), "failed", len(o.Failed), "skipped", len(o.Skipped), "gone", len(o.Gone), "replans", o.Replans, "leftAtGoal", o.LeftAtGoal,
			"estimatedFreedBytes", o.EstimatedFreed, "measuredFreedBytes", r.MeasuredFreed}
	}
	if gcrun.LogEnd(ctx, "Image GC", trigger, err, done...) {
		return removed, err
	}
	// A run that removed nothing (none was needed, or what was needed is
	// kept: in use, young, pinned...) is worth a line when asked for.
	logger := klog.FromContext(ctx)
	if len(r.Outcome.Removed) == 0 {
		logger = logger.V(2)
	}
	logger.Info("Image GC run done", "trigger", trigger, "removed", len(r.Outcome.Removed), "skipped", len(r.Outcome.Skipped), "gone", len(r.Outcome.Gone),
		"replans", r.Outcome.Replans, "leftAtGoal", r.Outcome.LeftAtGoal, "estimatedFreedBytes", r.Outcome.EstimatedFreed, "measuredFreedBytes", r.MeasuredFreed,
		"usagePercentBefore", r.Before.UsagePercent(), "usagePercentAfter", r.After.UsagePercent(), "duration", r.Duration.Round(time.Millisecond))
	return removed, nil
}

// GarbageCollect runs the image GC once: plan, remove, measure. It returns
// ErrRunInProgress if a run is going on. A *FreeDiskSpaceError in the error
// means the threshold rule could not be met; ErrInvalidDiskCapacity means no
// GC ran.
func (m *Manager) GarbageCollect(ctx context.Context, trigger string) (*Report, error) {
	return m.collectFor(ctx, trigger, demand{})
}

// collectFor runs the GC once, for what the disk asks beyond what the plan
// reads from it (demand).
func (m *Manager) collectFor(ctx context.Context, trigger string, d demand) (*Report, error) {
	if m.opts.PlanOnly {
		return nil, errPlanOnly
	}
	return gcrun.Collect(m.serial, trigger, func(r *Report) error { return m.collect(ctx, r, d) }, m.record, func(*Report) {
		if err := m.saveState(false); err != nil {
			klog.FromContext(ctx).Error(err, "Saving image GC state")
		}
	}, m.opts.OnRun)
}

func (m *Manager) collect(ctx context.Context, r *Report, d demand) error {
	plan, in, err := m.plan(ctx, d)
	if err != nil {
		return err
	}
	r.Plan, r.Before = plan, plan.Disk
	m.metrics.observePlan(plan, m.opts.Config.DryRun)
	replan := func(removed map[string]bool, held map[string]string, target uint64) *Plan {
		rest := make([]Image, 0, len(in.images))
		for _, img := range in.images {
			if !removed[img.ID] {
				rest = append(rest, img)
			}
		}
		return m.policy.replan(rest, held, target, plan.Disk, plan.Now)
	}
	rm := &firstRemoval{rt: m.opts.Runtime, clock: m.clock}
	check := m.checkBeforeRemoval(ctx)
	counted := func(img *Image) (string, error) {
		keep, err := check(img)
		m.metrics.observeCheck(keep, err)
		return keep, err
	}
	var space spaceGauge
	if !m.opts.Config.DryRun {
		// The run's goal, in available bytes: what the plan's Target asks
		// on top of the reading it was made on (the low threshold, with
		// the projection when the run was started ahead of a fill).
		space = &spaceWatch{m: m, goal: plan.Disk.Available + plan.Target, exact: plan.ExactAccounting && in.heldRead}
	}
	outcome, err := execute(ctx, rm, plan, counted, space, replan, m.opts.Config.DryRun)
	r.Outcome = outcome
	if !rm.at.IsZero() {
		if d := m.guard.removed(rm.at); d > 0 {
			m.metrics.reaction.WithLabelValues(phaseFirstRemoval).Observe(d.Seconds())
		}
		m.guard.restart()
	}
	// The records of the images removed, and of those found gone at the
	// check (removed by another, dry run or not): the same image pulled
	// again before the next listing is first seen then, also where the
	// runtime does not tell when images arrived.
	var forget []Decision
	if !outcome.DryRun {
		forget = outcome.Removed
	}
	for _, d := range slices.Concat(forget, outcome.Gone) {
		m.tracker.forget(d.Image.ID)
		if m.opts.Layers != nil {
			m.opts.Layers.Forget(d.Image.ID)
		}
	}
	if len(outcome.Removed) > 0 && !outcome.DryRun {
		r.After, r.Measured = m.settle(ctx, plan.Disk)
		if r.Measured {
			r.MeasuredFreed = int64(r.After.Available) - int64(r.Before.Available)
		}
	} else {
		r.After = plan.Disk
	}
	return err
}

// Plan lists the runtime's images and containers, brings usage up to date
// and returns the plan for the node as it is now. It removes nothing, and
// takes no run lock (unlike GarbageCollect): it only reads the runtime, and
// brings the usage records up to date as the usage watcher does, under the
// tracker's own lock. So it may run during a GC run, whose removals it may
// not see yet.
func (m *Manager) Plan(ctx context.Context) (*Plan, error) {
	plan, _, err := m.plan(ctx, demand{})
	return plan, err
}

// PlanAndToLow is Plan, and, from the same reading of the node, the plan
// for a collection under way when Plan frees nothing while usage is over
// the low threshold (nil otherwise): usage reached the high threshold and
// has not been under the low one since, so the threshold rule frees down to
// the low threshold even under the high one now, as the agent's disk checks
// do (Plan.Required stays what the high threshold asks now). Whether a
// collection is under way lives in the running agent's memory: `nodegc
// plan` shows both.
func (m *Manager) PlanAndToLow(ctx context.Context) (now, toLow *Plan, err error) {
	in, err := m.planInput(ctx)
	if err != nil {
		return nil, nil, err
	}
	if now, err = m.planOn(in, demand{}); err != nil || now.Target > 0 {
		return now, nil, err
	}
	in.images = slices.Clone(in.images) // the first plan's decisions point into them
	if toLow, err = m.planOn(in, demand{toLow: true}); err != nil || toLow.Target == 0 {
		return now, nil, err
	}
	return now, toLow, nil
}

// planInput is what a plan is made from: the images, marked, the disk, when,
// and how the scheduled rule saw the pods (Plan.PodsView).
type planInput struct {
	images []Image
	disk   DiskStats
	// now is when, on the timeline of the records the images were copied
	// from (Tracker.planInput).
	now      recordsNow
	podsView string
	// heldRead says that what else holds image storage was read
	// (LayerSource.Held), so that exact estimates leave it out.
	heldRead bool
}

// plan also returns what the plan was made from; it plans for what the
// disk asks beyond what the plan reads from it (demand).
func (m *Manager) plan(ctx context.Context, d demand) (*Plan, *planInput, error) {
	in, err := m.planInput(ctx)
	if err != nil {
		return nil, nil, err
	}
	plan, err := m.planOn(in, d)
	return plan, in, err
}

// planOn plans on in for d.
func (m *Manager) planOn(in *planInput, d demand) (*Plan, error) {
	plan, err := m.policy.planFor(in.images, in.disk, in.now.at, d)
	if plan != nil {
		plan.PodsView = in.podsView
		if l, ok := m.opts.Layers.(interface{ BlobsElsewhere() string }); ok && plan.ExactAccounting {
			plan.BlobsElsewhere = l.BlobsElsewhere()
		}
	}
	return plan, err
}

// planInput reads the node for a plan: the runtime's containers and
// images (usage brought up to date), the disk, when the images arrived, and
// what marks them (image volumes, containerd's records, the sandbox image,
// the pods bound to the node, layers).
func (m *Manager) planInput(ctx context.Context) (*planInput, error) {
	images, err := m.syncUsage(ctx)
	if err != nil {
		return nil, err
	}
	disk, err := m.diskStats(ctx)
	if err != nil {
		return nil, err
	}
	m.observeDisk(ctx, disk)
	arrivals := m.readArrivals(ctx, images, m.clock.Now(), &m.arrivalReads,
		"Cannot read when images arrived from the runtime; the minimum age counts from the start of nodegc's watch at the earliest meanwhile")
	// Now is read with the records, after the steps of the clock applied
	// to them while the above read the node.
	in, now := m.tracker.planInput(images)
	for i := range in {
		in[i].Arrived = arrivals[in[i].ID]
	}
	if err := m.markVolumes(ctx, in); err != nil {
		return nil, err
	}
	if err := m.markRecorded(ctx, in); err != nil {
		return nil, err
	}
	if err := m.markSandbox(ctx, in); err != nil {
		return nil, err
	}
	podsView, err := m.markScheduled(ctx, in, shortNames{})
	if err != nil {
		return nil, err
	}
	heldRead := m.addLayers(ctx, in)
	return &planInput{images: in, disk: disk, now: now, podsView: podsView, heldRead: heldRead}, nil
}

// markRecorded marks in use the images the runtime's own records of
// containers were made from (Options.ContainerRecords), and records them
// as used now, as markVolumes does: no event or CRI listing dates their
// use, and maximumGCAge counts from the last plan that saw a record. An
// image whose
// storage the runtime cannot read (ErrImageUnreadable), while records of
// containers tell only the top layer they were made on, cannot be told
// unused: it is marked Unreadable, and kept; the plan goes on with the
// others (one broken image would otherwise stop every plan while any
// container exists). Each is logged once until a plan no longer finds it
// unreadable.
func (m *Manager) markRecorded(ctx context.Context, in []Image) error {
	recs, err := m.containerRecords(ctx)
	if err != nil {
		return err
	}
	found := map[string]bool{}
	var recorded []string
	for i := range in {
		if in[i].InUse {
			continue
		}
		used, err := recs.use(ctx, &in[i])
		switch {
		case errors.Is(err, ErrImageUnreadable):
			in[i].Unreadable, found[in[i].ID] = true, true
			m.unreadable.tell(ctx, in[i].ID, err)
		case err != nil:
			return err
		}
		in[i].InUse = used
		if used {
			recorded = append(recorded, in[i].ID)
		}
	}
	m.unreadable.only(found)
	m.tracker.usedAt(recorded, m.clock.Now())
	return nil
}

// unreadableImages are the images a plan or a check found unreadable
// (ErrImageUnreadable) since a plan last did not: each is logged once
// while it stays so.
type unreadableImages struct {
	mu  sync.Mutex
	ids map[string]bool
}

// tell notes that id cannot be read (err), and logs it unless it is noted
// already.
func (u *unreadableImages) tell(ctx context.Context, id string, err error) {
	u.mu.Lock()
	known := u.ids[id]
	if !known {
		if u.ids == nil {
			u.ids = map[string]bool{}
		}
		u.ids[id] = true
	}
	u.mu.Unlock()
	if !known {
		klog.FromContext(ctx).Info("Warning: containerd cannot read what an image holds, so whether a container record was made from it cannot be told; the image is kept until it can be read (pulling it again may repair it) or is removed by hand",
			"imageID", id, "err", err)
	}
}

// only forgets every image but those a plan found unreadable (found): the
// others are readable again, gone, or no longer read.
func (u *unreadableImages) only(found map[string]bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	maps.DeleteFunc(u.ids, func(id string, _ bool) bool { return !found[id] })
}

// recordedImages is a listing of the runtime's records of containers
// (Options.ContainerRecords), to tell the images they were made from; nil
// (no source) tells none.
type recordedImages struct {
	src    ContainerRecordSource
	names  map[string]string // refForms of the images the records name
	layers map[string]bool
}

// containerRecords lists the runtime's records of containers.
func (m *Manager) containerRecords(ctx context.Context) (*recordedImages, error) {
	src := m.opts.ContainerRecords
	if src == nil {
		return nil, nil
	}
	recs, err := src.ContainerRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which images the runtime's containers were made from: %w", err)
	}
	return &recordedImages{src: src, names: refForms(recs.Images), layers: recs.Layers}, nil
}

// use says whether a record names img, in any form, or has its root
// filesystem made on img's top layer (a record names the image as it was
// given, and a tag may have moved to another image since). Only the top
// layer counts: an image whose layers are only under a root filesystem
// (the base another image was built on) is not in use.
func (r *recordedImages) use(ctx context.Context, img *Image) (bool, error) {
	if r == nil {
		return false, nil
	}
	if _, ok := namedBy(img, r.names); ok {
		return true, nil
	}
	if len(r.layers) == 0 {
		return false, nil
	}
	top, err := r.src.TopLayer(ctx, img)
	if err != nil {
		return false, fmt.Errorf("cannot tell whether a container of the runtime was made from image %s: %w", img.ID, err)
	}
	return top != "" && r.layers[top], nil
}

// markSandbox marks the sandbox images: the runtime's, written in its
// config as operators write references ("rancher/mirrored-pause:3.6",
// "registry.k8s.io/pause:3.10@sha256:..."), in whichever form CRI lists it;
// those of the sandboxes the runtime holds (Options.Sandboxes); and, while
// it holds none, those its sandboxes last ran, which the tracker remembers
// across restarts (containerd 2.x names its sandbox image nowhere else
// when its config writes it in another form than it lists).
func (m *Manager) markSandbox(ctx context.Context, in []Image) error {
	configured := refForms(m.opts.SandboxImages)
	if m.opts.Sandboxes == nil { // the remembered ones stay
		for i := range in {
			_, byConfig := namedBy(&in[i], configured)
			in[i].Sandbox = byConfig || in[i].RanSandboxes
		}
		return nil
	}
	running, err := m.runningSandboxForms(ctx)
	if err != nil {
		return err
	}
	ran := map[string]bool{}
	for i := range in {
		if _, ok := namedBy(&in[i], running); ok {
			ran[in[i].ID] = true
		}
	}
	m.tracker.rememberSandboxes(ran)
	for i := range in {
		_, byConfig := namedBy(&in[i], configured)
		in[i].Sandbox = byConfig || ran[in[i].ID] || (len(ran) == 0 && in[i].RanSandboxes)
	}
	return nil
}

// runningSandboxForms returns the forms (imageref.Forms) of the images the
// runtime's sandboxes run (Options.Sandboxes).
func (m *Manager) runningSandboxForms(ctx context.Context) (map[string]string, error) {
	names, err := m.opts.Sandboxes.SandboxImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which images the pod sandboxes run: %w", err)
	}
	return refForms(names), nil
}

// refForms maps each reference, as written (as an ID is, in whatever form
// the runtime gives it), and its forms (imageref.Forms) to it.
func refForms(refs []string) map[string]string {
	forms := make(map[string]string, len(refs))
	for _, r := range refs {
		forms[r] = r
		for _, f := range imageref.Forms(r) {
			forms[f] = r
		}
	}
	return forms
}

// addLayers fills every image's layers, or none: a partial set would make
// the accounting count some bytes twice. Storage something else holds
// (LayerSource.Held) is left out: removing the images frees none of it.
// When that cannot be read, it is left in (estimates may then be high), and
// said at -v=2; heldRead is false then. An image whose own storage
// containerd cannot read while it answers (ErrImageUnreadable: kept as
// unreadable where records exist, markRecorded) counts as one layer of its
// own, of its CRI size, and the others as ever; what it shares with them
// is unknown, so their estimates may be high, and heldRead is false too:
// removals are not judged on them (spaceWatch.exact).
func (m *Manager) addLayers(ctx context.Context, in []Image) (heldRead bool) {
	if m.opts.Layers == nil {
		return false
	}
	held, err := m.opts.Layers.Held(ctx)
	m.tellRead(ctx, readHeld, &m.heldReads, m.clock.Now(), err,
		"Cannot read what else holds image storage in containerd; estimates count it as freed meanwhile",
		"Can read what else holds image storage in containerd again")
	listed := make(map[string]bool, len(in))
	for i := range in {
		listed[in[i].ID] = true
	}
	m.opts.Layers.Retain(listed)
	unreadable := false
	for i := range in {
		layers, err := m.opts.Layers.Layers(ctx, &in[i])
		if errors.Is(err, ErrImageUnreadable) {
			klog.FromContext(ctx).V(2).Info("Cannot read what an image holds; counting it by its CRI size, and not judging removals on their estimates", "imageID", in[i].ID, "err", err)
			in[i].Layers = []Layer{{Key: unique.Make("unreadable:" + in[i].ID), Size: in[i].Size}}
			unreadable = true
			continue
		}
		if err != nil {
			m.layersWarn.Do(func() {
				klog.FromContext(ctx).Info("Cannot read image layers from containerd; planning with CRI sizes for now", "imageID", in[i].ID, "err", err)
			})
			for j := range in {
				in[j].Layers = nil
			}
			return false
		}
		if len(held) > 0 && slices.ContainsFunc(layers, func(l Layer) bool { return held[l.Key] }) {
			layers = slices.DeleteFunc(slices.Clone(layers), func(l Layer) bool { return held[l.Key] })
		}
		if layers == nil {
			layers = []Layer{}
		}
		in[i].Layers = layers
	}
	return err == nil && !unreadable
}

// checkBeforeRemoval returns the check execute makes right before each
// removal. The runtime is asked for the image as it is now (ImageLookup):
// one another removed since the plan is gone; one that gained names since
// (a pull of another name of the same image, which adds a name and fetches
// nothing) is judged by all its names, as RemoveImage would remove every
// one of them: a new name that is pinned, excluded, the sandbox image's, or
// one a pod bound to the node names keeps it, and so does, with
// keepNewestPerRepository set, a tag of a repository the plan did not see
// it in (the plan could not rank it there). The runtime's containers are
// listed again, whether or not the event stream is live (the runtime may
// drop events, and a CREATED event may still be on its way). When the
// image arrived is read again (Options.Arrivals): a copy pulled since the
// plan, after another client removed the one planned, is as young as its
// arrival, less the steps of the clock forward since the plan read
// arrivals (arrivedYoung).
//
// What can change while those slow calls go on is read after them, in
// this order, each as late as the one before allows: the runtime's
// running sandboxes (Options.Sandboxes); what events told meanwhile; the
// containers, listed again, event stream live or not (an event may still
// be on its way, and a stream may stay open and send nothing), with what
// events told since; the runtime's own records of containers
// (Options.ContainerRecords), which hold containers CRI does not list
// (the listing and the records read are made again while they took more
// than lateReadBound); and the pod view, so a pod bound since the plan, or
// during the check, keeps the images it names. When the runtime cannot be
// asked, the check fails and the run stops: nothing is removed on doubt;
// nor while what the manager was built for may not hold (removalsHeld). A
// container created after the check's last step, before RemoveImage, is
// not seen: CRI has no removal on condition. Nor is a name of the image
// pulled then: containerd removes every name the image has at its removal.
func (m *Manager) checkBeforeRemoval(ctx context.Context) removalCheck {
	lookup, _ := m.opts.Runtime.(ImageLookup)
	configured := refForms(m.opts.SandboxImages)
	asked := shortNames{}
	return func(planned *Image) (string, error) {
		img := planned
		if lookup != nil {
			got, err := lookup.ImageStatus(ctx, planned.ID)
			if err != nil {
				return "", err
			}
			if got == nil {
				return checkGone, nil
			}
			img = nowNamed(planned, got)
		}
		if _, err := m.tracker.syncContainers(ctx, m.listContainers); err != nil {
			return "", err
		}
		// After the first calls, so that a runtime that is down fails the
		// check with its own error.
		if err := m.removalsHeld(); err != nil {
			return "", err
		}
		if m.tracker.inUse(img) {
			return KeepInUse, nil
		}
		if mounted, err := m.mountedByContainer(ctx, img); err != nil {
			return "", err
		} else if mounted {
			return KeepInUse, nil
		}
		if img.Pinned {
			return KeepPinned, nil
		}
		if _, ok := namedBy(img, configured); ok {
			return KeepSandbox, nil
		}
		if m.policy.excluded(img) {
			return KeepExcluded, nil
		}
		if m.policy.cfg.KeepNewestPerRepository > 0 && newName(planned, img) {
			return KeepNewestTags, nil
		}
		// When the image on the node arrived: another client may have
		// removed it and pulled it again since the plan, which dated the
		// copy that went.
		if m.arrivedYoung(ctx, planned, img) {
			return KeepMinAge, nil
		}
		// Last, what can change while the calls above went on (a loaded
		// runtime answers slowly, and the disk fills when it is loaded):
		// a sandbox started from the image; what the runtime's events told
		// meanwhile, a container created from the image since the listing,
		// or one that mounts it, whose status is read now. Then the
		// containers are listed again, also while the event stream is
		// live: an event may still be on its way (containerd queues it
		// after CreateContainer returned), and a stream that stays open
		// but sends nothing counts as live. Then the records, and the pod
		// view: a pod bound meanwhile keeps the images it names.
		// RemoveImage follows at once; containerd removes an image
		// whatever uses it.
		if m.opts.Sandboxes != nil {
			forms, err := m.runningSandboxForms(ctx)
			if err != nil {
				return "", err
			}
			if _, ok := namedBy(img, forms); ok {
				return KeepSandbox, nil
			}
		}
		if used, err := m.usedByContainer(ctx, img); err != nil {
			return "", err
		} else if used {
			return KeepInUse, nil
		}
		// The last listing and records read, again while they were slow
		// (lateReadBound): containerd's records may take seconds to read
		// (a snapshot on a proxy snapshotter that hangs), and a container
		// made meanwhile would not be seen.
		for tries := 1; ; tries++ {
			began := m.checkClock.Now()
			if keep, err := m.listedLast(ctx, img); err != nil || keep != "" {
				return keep, err
			}
			took := m.checkClock.Since(began)
			if took <= lateReadBound {
				break
			}
			if tries == lateReadTries {
				return "", fmt.Errorf("the runtime's containers and their records took %v to read, %d times in a row: an image cannot be checked right before its removal while the runtime answers so slowly", took.Round(time.Millisecond), tries)
			}
			klog.FromContext(ctx).V(2).Info("The check's last reads of the runtime's containers were slow; reading them again", "imageID", img.ID, "took", took)
		}
		one := []Image{*img}
		if _, err := m.markScheduled(ctx, one, asked); err != nil {
			return "", err
		}
		if one[0].Scheduled {
			return KeepScheduled, nil
		}
		// And whether the runtime's connection was lost meanwhile: what
		// the check asked may have been answered by a runtime restarted
		// with another config.
		if err := m.removalsHeld(); err != nil {
			return "", err
		}
		return "", nil
	}
}

// lateReadBound is how long the check's last reads of containers
// (listedLast) may take before they are made again, at most lateReadTries
// times in all: a CRI listing takes milliseconds, and a read that took
// seconds leaves as long for a container to be made unseen.
const (
	lateReadBound = 2 * time.Second
	lateReadTries = 3
)

// listedLast is the check's last reads of containers: the runtime's
// containers, listed again, with what events told meanwhile, then the
// runtime's own records of containers (Options.ContainerRecords). A record
// is made and removed without an event CRI gives (ctr, nerdctl, buildkit's
// containerd worker), so only a read as late as the CRI containers' sees
// one made during the check. An image that became unreadable since the
// plan stays, as the plan keeps one (markRecorded), and the run goes on.
func (m *Manager) listedLast(ctx context.Context, img *Image) (string, error) {
	if _, err := m.tracker.syncContainers(ctx, m.listContainers); err != nil {
		return "", err
	}
	if used, err := m.usedByContainer(ctx, img); err != nil {
		return "", err
	} else if used {
		return KeepInUse, nil
	}
	recs, err := m.containerRecords(ctx)
	if err != nil {
		return "", err
	}
	used, err := recs.use(ctx, img)
	switch {
	case errors.Is(err, ErrImageUnreadable):
		m.unreadable.tell(ctx, img.ID, err)
		return KeepUnreadable, nil
	case err != nil:
		return "", err
	case used:
		return KeepInUse, nil
	}
	return "", nil
}

// readArrivals reads when images arrived (Options.Arrivals; nil without
// one) and dates the tracker's records by it. A failed read is counted and
// logged (tellRead, with streak and failing) and gives none.
func (m *Manager) readArrivals(ctx context.Context, images []*runtimeapi.Image, now time.Time, streak *readStreak, failing string) map[string]time.Time {
	if m.opts.Arrivals == nil {
		return nil
	}
	// Before the asking: the steps forward from here count for a copy
	// pulled after the runtime answered (Tracker.observeArrivals).
	from := m.tracker.follow()
	arrivals, err := m.opts.Arrivals.Arrivals(ctx, images)
	m.tellRead(ctx, readArrivals, streak, now, err, failing,
		"Can read when images arrived from the runtime again", "watchedSince", m.tracker.watchStart())
	if err != nil {
		return nil
	}
	m.tracker.observeArrivals(arrivals, from)
	return arrivals
}

// arrivedYoung reads when img (as the runtime names it now) arrived on the
// node and says whether that was since the plan read it (planned.Arrived:
// the image was removed and pulled again, or the plan could not read it)
// and less than the minimum age ago. The read dates the image anew in the
// tracker, as a plan's does, and the age is the record's, so the check
// and the next plan count it alike: from the arrival plus the steps of
// the clock forward since the plan began to read arrivals (the arrival is
// on the wall clock of the pull, which a step since has not moved; see
// Tracker.observeArrivals). A step forward of more than the minimum age
// right after the pull would otherwise make the copy old. An image the
// tracker no longer has a record of (a listing without it came since the
// plan) counts from now, as a new image does. Without an arrival source (a
// runtime other than containerd), or when the read fails, the plan's
// dating stands.
func (m *Manager) arrivedYoung(ctx context.Context, planned, img *Image) bool {
	at, ok := m.readArrivals(ctx, []*runtimeapi.Image{{Id: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests}}, m.clock.Now(), &m.checkArrivalReads,
		"Cannot read when an image arrived at the check before its removal; the plan's dating stands")[img.ID]
	if !ok || at.Equal(planned.Arrived) {
		return false
	}
	age, _ := m.tracker.age(img.ID)
	return age < m.policy.minAge()
}

// usedByContainer says whether a container the tracker knows uses img as
// its image or mounts it as an image volume.
func (m *Manager) usedByContainer(ctx context.Context, img *Image) (bool, error) {
	if m.tracker.inUse(img) {
		return true, nil
	}
	return m.mountedByContainer(ctx, img)
}

// nowNamed is the planned image with the names and pinned flag the runtime
// gives it now.
func nowNamed(planned *Image, now *runtimeapi.Image) *Image {
	img := *planned
	img.RepoTags, img.RepoDigests, img.Pinned = now.GetRepoTags(), now.GetRepoDigests(), now.GetPinned()
	return &img
}

// newName says whether now has a tag was had not, or a digest of a
// repository none of was's names is of: the plan could not rank it there
// (keepNewestPerRepository). A tag moved within a repository counts: it
// may be that repository's newest now.
func newName(was, now *Image) bool {
	if slices.ContainsFunc(now.RepoTags, func(t string) bool { return !slices.Contains(was.RepoTags, t) }) {
		return true
	}
	seen := map[string]bool{}
	for _, r := range repositories(was) {
		seen[r] = true
	}
	return slices.ContainsFunc(repositories(now), func(r string) bool { return !seen[r] })
}

func (m *Manager) listContainers(ctx context.Context) ([]*runtimeapi.Container, error) {
	began := m.clock.Now()
	cs, err := m.opts.Runtime.ListContainers(ctx, nil)
	if err == nil {
		m.listedAt.Store(&began)
	}
	return cs, err
}

// liveRelistInterval is the longest time without a container listing
// while the event stream is live, as the kubelet's evented PLEG relists:
// a runtime may drop events (CRI-O, when its channel is full; one that
// hands each event to one subscriber), and a container whose events were
// lost is dated by the next listing while it exists.
const liveRelistInterval = 5 * time.Minute

// relistDue says whether containers were last listed liveRelistInterval
// ago or more (or never).
func (m *Manager) relistDue() bool {
	last := m.listedAt.Load()
	return last == nil || m.clock.Since(*last) >= liveRelistInterval
}

// syncUsage lists the runtime's containers, then its images, and brings
// the usage records up to date; it returns the image listing.
func (m *Manager) syncUsage(ctx context.Context) ([]*runtimeapi.Image, error) {
	if _, err := m.tracker.syncContainers(ctx, m.listContainers); err != nil {
		return nil, err
	}
	return m.syncImages(ctx)
}

// syncImages lists the runtime's images and brings the usage records in
// line with the listing; it returns the listing.
func (m *Manager) syncImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	began := m.clock.Now()
	images, err := m.tracker.syncImages(ctx, m.opts.Runtime.ListImages, m.clock.Now)
	if err == nil {
		m.imagesListedAt.Store(&began)
	}
	return images, err
}

// poll is the usage watcher's listing while no event stream is live: the
// containers at every diskCheckInterval, which date the uses of the images
// the last image listing had (Tracker.touchUsed); the images themselves
// only when none was listed for liveRelistInterval (a container that names
// one not listed yet has them listed at once: unknownImages). ListImages
// costs the runtime in proportion to its images and their names, and the
// images a poll needs rarely change.
func (m *Manager) poll(ctx context.Context) {
	if last := m.imagesListedAt.Load(); last == nil || m.clock.Since(*last) >= liveRelistInterval {
		m.reconcile(ctx)
		return
	}
	if _, err := m.tracker.syncContainers(ctx, m.listContainers); err != nil {
		klog.FromContext(ctx).V(2).Info("Listing the runtime's containers for usage tracking failed; will retry", "err", err)
		return
	}
	m.tracker.touchUsed(m.clock.Now())
}

// saveInterval is the least time between two writes of the usage records
// while they change: a change after a quiet interval is written at once,
// later ones at the end of the interval. A crash (kill -9, power loss)
// loses at most the usage of the last interval.
const saveInterval = 2 * time.Second

// maxSaveRetry bounds the wait between tries after failed writes.
const maxSaveRetry = time.Minute

// saveChanges writes the usage records to the state directory when they
// change, at most once per saveInterval, until ctx ends (Run saves once
// more then). After a failed write (the state directory's filesystem is
// full, say: the moment image GC is for) it tries again after
// nextSaveRetry, changes or not.
func (m *Manager) saveChanges(ctx context.Context) {
	var (
		last  time.Time
		retry time.Duration // 0 while the last write succeeded
	)
	for {
		wait := retry
		if retry == 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.tracker.recordsChanged():
			}
			wait = saveInterval - m.waitClock.Since(last)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.waitClock.After(wait):
			}
		}
		last = m.waitClock.Now()
		if err := m.saveState(false); err != nil {
			retry = nextSaveRetry(retry)
			klog.FromContext(ctx).Error(err, "Saving image GC state; will retry", "retryIn", retry)
			continue
		}
		retry = 0
	}
}

// nextSaveRetry returns the wait before the next try after a failed write,
// given the last one (0 after a success): saveInterval, then doubling up to
// maxSaveRetry.
func nextSaveRetry(last time.Duration) time.Duration {
	return min(max(2*last, saveInterval), maxSaveRetry)
}

// saveState writes the usage records if they changed (all: also when only
// recent last-used times did, Tracker.saveAll), and counts the write.
func (m *Manager) saveState(all bool) error {
	save := m.tracker.save
	if all {
		save = m.tracker.saveFinal
	}
	wrote, err := save()
	if wrote || err != nil {
		m.metrics.observeSave(err)
	}
	return err
}

// diskStats reads the image filesystem's capacity and free space.
func (m *Manager) diskStats(ctx context.Context) (DiskStats, error) {
	mp := m.mountpoint.Load()
	if mp == nil {
		info, err := m.opts.Runtime.ImageFsInfo(ctx)
		if err != nil {
			return DiskStats{}, err
		}
		fss := info.GetImageFilesystems()
		if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
			return DiskStats{}, errors.New("the runtime reports no image filesystem mountpoint")
		}
		p := fss[0].GetFsId().GetMountpoint()
		m.mountpoint.Store(&p)
		mp = &p
	}
	return m.statDisk(*mp)
}

// knownDiskStats reads the image filesystem at the mountpoint the runtime
// gave last, without asking the runtime: it fails when the last reading
// did. The read right before a removal makes no call to the runtime.
func (m *Manager) knownDiskStats() (DiskStats, error) {
	mp := m.mountpoint.Load()
	if mp == nil {
		return DiskStats{}, errors.New("the image filesystem's mountpoint is not known: the last reading of it failed")
	}
	return m.statDisk(*mp)
}

// statDisk reads the image filesystem at mp (Options.Disk).
func (m *Manager) statDisk(mp string) (DiskStats, error) {
	st, err := m.opts.Disk.Stat(mp)
	switch {
	case errors.Is(err, diskstats.ErrImplausible):
		return DiskStats{}, fmt.Errorf("image filesystem %s: %w: %w", mp, ErrInvalidDiskCapacity, err)
	case err != nil:
		m.mountpoint.Store(nil) // ask the runtime again next time
		return DiskStats{}, fmt.Errorf("image filesystem %s: %w", mp, err)
	case st.Capacity == 0:
		return DiskStats{}, fmt.Errorf("image filesystem %s: %w: capacity 0", mp, ErrInvalidDiskCapacity)
	case st.Available > st.Capacity:
		return DiskStats{}, fmt.Errorf("image filesystem %s: %w: %d bytes available of %d", mp, ErrInvalidDiskCapacity, st.Available, st.Capacity)
	}
	return DiskStats{Capacity: st.Capacity, Available: st.Available}, nil
}

// settle waits, within SettleTimeout, for the runtime's asynchronous cleanup
// and returns the disk once available bytes stopped growing for a while
// (gcrun.Settle). false: the disk could not be read at all. containerd
// removes content and snapshots at a garbage collection after the image
// record; its CRI plugin deletes an image's last reference synchronously
// (it has containerd collect and waits), so there the layers are free when
// RemoveImage returns, however rarely containerd collects on its own
// (TestSharedLayerAccounting runs on such a containerd).
func (m *Manager) settle(ctx context.Context, before DiskStats) (DiskStats, bool) {
	var (
		last     DiskStats
		best     uint64
		measured bool
	)
	gcrun.Settle(ctx, m.waitClock, m.opts.SettleTimeout, func() (grew, more bool) {
		cur, err := m.diskStats(ctx)
		if err != nil {
			return false, false // keep the last reading
		}
		if !measured {
			last, best, measured = cur, cur.Available, true
			return false, true
		}
		m.observeDisk(ctx, cur)
		if grew = cur.Available > best+gcrun.SettleNoise; grew {
			best = cur.Available
		}
		last = cur
		return grew, true
	})
	if !measured {
		return before, false
	}
	return last, true
}

// record counts the run, what it removed and the bytes it freed.
func (m *Manager) record(r *Report) {
	result := resultSuccess
	var fe *FreeDiskSpaceError
	switch {
	case errors.As(r.Err, &fe):
		result = resultNotEnough
	case errors.Is(r.Err, ErrInvalidDiskCapacity):
		result = resultNoCapacity
	case r.Err != nil:
		result = resultError
	case r.Outcome != nil && r.Outcome.DryRun:
		result = resultDryRun
	}
	m.metrics.runs.Observe(r.Trigger, result, r.Duration)
	if r.Outcome == nil || r.Outcome.DryRun {
		return
	}
	for _, d := range r.Outcome.Removed {
		m.metrics.removed.WithLabelValues(d.Reason).Inc()
	}
	m.metrics.bytesEstimated.Add(float64(r.Outcome.EstimatedFreed))
	if r.Measured && r.MeasuredFreed > 0 {
		m.metrics.bytesMeasured.Add(float64(r.MeasuredFreed))
	}
}

// watchUsage keeps last-used times current by listing the containers
// every diskCheckInterval, or, with Config.ContainerEvents, from the
// container event stream while it is live, listing meanwhile (the runtime
// has no stream, or it broke and is being reopened with backoff). While the
// stream is live, containers are still listed when no listing (a plan's, a
// check's, this loop's) was made for liveRelistInterval.
//
// The stream is off by default: containerd 2.x blocks the publishers of
// container events (CreateContainer, StartContainer, StopContainer,
// RemoveContainer) while a subscriber does not read, so a subscribed nodegc
// that is stopped or frozen stalls every container on the node. When on,
// the stream's reader only applies events (Tracker.observeEvent: a moment
// under the tracker's lock, never a runtime call), so nodegc reads as fast
// as the runtime sends while it runs. The listings, also the one made when
// the stream opens, run here instead.
func (m *Manager) watchUsage(ctx context.Context) {
	changed := make(chan struct{}, 1)
	var wg sync.WaitGroup
	if m.opts.Config.ContainerEvents {
		wg.Go(func() { m.streamEvents(ctx, changed) })
	} else {
		m.metrics.setUsageSource(usageFromPolling)
		signal(changed) // the first listing at once
		klog.FromContext(ctx).V(2).Info("Listing containers for image usage (imageGC.containerEvents is off)",
			"interval", m.opts.Config.DiskCheckInterval.Duration)
	}
	defer wg.Wait()
	t := m.clock.NewTicker(m.opts.Config.DiskCheckInterval.Duration)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed: // opened (list what exists now), broke or off (poll at once)
			m.reconcile(ctx)
		case <-m.tracker.unknownImages():
			// An event or a container listing named an image pulled since
			// the last image listing.
			if _, err := m.syncImages(ctx); err != nil {
				klog.FromContext(ctx).V(2).Info("Listing images for an image a container named failed; the next listing dates its use", "err", err)
			}
		case <-t.C():
			// Polling while no stream is live; while one is, a listing
			// now and then all the same, for the events the runtime lost.
			switch {
			case !m.eventsLive.Load():
				m.poll(ctx)
			case m.relistDue():
				m.reconcile(ctx)
			}
		}
	}
}

// streamEvents reads the container event stream, reopening it with backoff
// when it breaks, until ctx ends or the runtime says it has none. It signals
// changed when the stream opens and when it breaks.
func (m *Manager) streamEvents(ctx context.Context, changed chan<- struct{}) {
	delay := time.Second
	for ctx.Err() == nil {
		err := m.opts.Runtime.WatchContainerEvents(ctx, func() {
			m.eventsLive.Store(true)
			m.metrics.setUsageSource(usageFromEvents)
			delay = time.Second
			signal(changed)
		}, m.tracker.observeEvent)
		m.eventsLive.Store(false)
		m.metrics.setUsageSource(usageFromPolling)
		if ctx.Err() != nil {
			return
		}
		signal(changed)
		if errors.Is(err, cri.ErrUnsupported) {
			klog.FromContext(ctx).Info("The runtime has no container event stream; polling containers for image usage",
				"interval", m.opts.Config.DiskCheckInterval.Duration)
			return
		}
		klog.FromContext(ctx).Info("Container event stream broke; polling containers until it is reopened", "err", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// writeStreamHeld is how long a stream of writes must have lasted for its
// end to start the reopening backoff over.
const writeStreamHeld = 30 * time.Second

// writeCheckSpacing is the shortest time between two disk checks that
// writes asked for: the shortest diskCheckInterval allowed.
const writeCheckSpacing = 100 * time.Millisecond

// watchWrites follows the runtime's writes to its storage (Options.Writes),
// reopening the stream with backoff when it breaks, until ctx ends. Each
// write signals wrote; the gauge says whether they are followed.
func (m *Manager) watchWrites(ctx context.Context, wrote chan<- struct{}) {
	logger := klog.FromContext(ctx)
	delay := time.Second
	for ctx.Err() == nil {
		var opened bool
		var openedAt time.Time // opened is called on this goroutine
		err := m.opts.Writes.WatchWrites(ctx, func() {
			opened, openedAt = true, m.clock.Now()
			m.metrics.writesFollowed.Set(1)
			logger.V(2).Info("Following the runtime's writes to its storage: a pull's blobs, layers and images have the disk read at once")
		}, func() { signal(wrote) })
		m.metrics.writesFollowed.Set(0)
		if ctx.Err() != nil {
			return
		}
		// containerd confirms no subscription: only a stream that held
		// a while ends the backoff, not one refused at its first read.
		if opened && m.clock.Since(openedAt) >= writeStreamHeld {
			delay = time.Second
		}
		msg := "The runtime's stream of writes to its storage broke; the disk is read every diskCheckInterval until it is reopened"
		if !opened {
			msg = "Cannot follow the runtime's writes to its storage; the disk is read every diskCheckInterval until it can"
		}
		logger.Info(msg, "err", err, "diskCheckInterval", m.opts.Config.DiskCheckInterval.Duration, "retryIn", delay)
		select {
		case <-ctx.Done():
			return
		case <-m.clock.After(delay):
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func (m *Manager) reconcile(ctx context.Context) {
	if _, err := m.syncUsage(ctx); err != nil {
		klog.FromContext(ctx).V(2).Info("Listing the runtime for usage tracking failed; will retry", "err", err)
	}
}

// firstRemoval passes removals on to the runtime and notes when the first
// one succeeded.
type firstRemoval struct {
	rt    imageRemover
	clock clock.PassiveClock
	at    time.Time
}

func (f *firstRemoval) RemoveImage(ctx context.Context, id string) error {
	err := f.rt.RemoveImage(ctx, id)
	if err == nil && f.at.IsZero() {
		f.at = f.clock.Now()
	}
	return err
}
