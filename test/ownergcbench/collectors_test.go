package ownergcbench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// syncPoll is how often a collector is asked whether it has synced: its
// /metrics (nodegc) or its log file (kube-controller-manager).
const syncPoll = 100 * time.Millisecond

// syncTimeout bounds the wait for a collector to sync.
const syncTimeout = 10 * time.Minute

// kcmSynced and kcmNotSynced are what kube-controller-manager's garbage
// collector logs once every monitor synced, or when its initial sync
// timed out (30s) and it proceeds anyway (v1.34,
// pkg/controller/garbagecollector/garbagecollector.go).
const (
	kcmSynced    = "Garbage collector: all resource monitors have synced"
	kcmNotSynced = "Garbage collector: not all resource monitors could be synced"
)

// kcmGCStart and nodegcGCStart are the substrings of the first line each
// garbage collector logs (kube-controller-manager's has its logger's name
// between the two; nodegc's is in pkg/ownergc/run.go).
var (
	kcmGCStart    = []string{`"Starting controller"`, `controller="garbagecollector"`}
	nodegcGCStart = []string{"Starting owner garbage collector"}
)

// collector is one way to start a garbage collector on the bench's cluster.
type collector struct {
	name  string // as the table names it
	short string // in file names: nodegc, kcm
	start func(e *benchEnv) *running
}

// running is a started collector.
type running struct {
	pid     int
	logPath string
	began   time.Time // just before the process was started
	// waitSynced returns once the collector says it synced, and when.
	waitSynced func(ctx context.Context) (time.Time, error)
	// gcStartLine are the substrings of the log line its garbage collector
	// begins with.
	gcStartLine []string
	stop        func()
	// profileURL is where it serves Go's profiles, if it does (see
	// profiler).
	profileURL string
}

// startup is how long a collector took from its process's start to synced.
type startup struct {
	synced time.Duration
	// gcStarted is when its log says its garbage collector started, from the
	// process's start (0 when the line is not found): what the process does
	// before collecting (flags, configuration, clients) comes before it.
	gcStarted time.Duration
}

// sync waits until r has synced and says when, from its start.
func (r *running) sync(e *benchEnv) startup {
	e.b.Helper()
	ctx, cancel := context.WithTimeout(e.b.Context(), syncTimeout)
	defer cancel()
	at, err := r.waitSynced(ctx)
	if err != nil {
		e.b.Fatalf("collector (log %s) did not sync: %v", r.logPath, err)
	}
	s := startup{synced: at.Sub(r.began)}
	if t, ok := logLineTime(r.logPath, r.began, r.gcStartLine...); ok {
		s.gcStarted = t.Sub(r.began)
	}
	return s
}

// unlimited is the kubeAPIQPS that turns nodegc's client-side rate limit
// off.
const unlimited = -1

// nodegc runs `nodegc run --owner-gc=only`, built from this tree, with
// its owner GC client at qps (unlimited: no client-side limit) and burst,
// and no leader election (kube-controller-manager runs with
// --leader-elect=false too). The container runtime endpoint does not
// exist: with --owner-gc=only no node GC runs and nothing dials it.
func nodegc(qps float32, burst int32) collector {
	name := fmt.Sprintf("nodegc qps=%g burst=%d", qps, burst)
	if qps < 0 {
		name = "nodegc (no client-side rate limit)"
	}
	return nodegcBinary(name, "nodegc", "", qps, burst)
}

// comparedNodegc is nodegc run from the binary at bin (see
// sizes.compare) rather than from this tree's, unthrottled.
func comparedNodegc(bin string) collector {
	return nodegcBinary("nodegc built elsewhere ("+bin+")", "nodegc-compared", bin, unlimited, 0)
}

// nodegcBinary is nodegc as the collector name (short in file names), run
// from the binary at bin ("": this tree's).
func nodegcBinary(name, short, bin string, qps float32, burst int32) collector {
	return collector{
		name:  name,
		short: short,
		start: func(e *benchEnv) *running {
			e.b.Helper()
			dir, err := os.MkdirTemp(e.dir, "nodegc-")
			if err != nil {
				e.b.Fatal(err)
			}
			text := fmt.Sprintf(`apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
containerRuntimeEndpoint: unix:///nonexistent/nodegc-bench/cri.sock
stateDirectory: %s
leaderElection:
  leaderElect: false
ownerGC:
  kubeAPIQPS: %g
  kubeAPIBurst: %d
`, filepath.Join(dir, "state"), qps, burst)
			if e.prof != nil {
				text += "enableProfilingHandler: true\n"
			}
			cfg, err := nodegcproc.WriteConfig(filepath.Join(dir, "config.yaml"), text)
			if err != nil {
				e.b.Fatal(err)
			}
			logPath := filepath.Join(dir, "nodegc.log")
			began := time.Now()
			path := bin
			if path == "" {
				path = e.nodegcBin
			}
			a, err := nodegcproc.Start(path, cfg, logPath, []string{"NODE_NAME=bench-node", "GOMAXPROCS=" + nodegcproc.DeployedGOMAXPROCS},
				"--owner-gc=only", "--kubeconfig", e.c.KubeconfigPath())
			if err != nil {
				e.b.Fatal(err)
			}
			stopped := false
			stop := func() {
				if stopped {
					return
				}
				stopped = true
				if _, err := a.Stop(10 * time.Second); err != nil {
					e.b.Errorf("stop nodegc: %v", err)
				}
			}
			e.b.Cleanup(stop)
			r := &running{pid: a.PID(), logPath: logPath, began: began, gcStartLine: nodegcGCStart, stop: stop,
				waitSynced: func(ctx context.Context) (time.Time, error) {
					var at time.Time
					err := testbed.Poll(ctx, syncPoll, func(ctx context.Context) (bool, error) {
						if a.Exited() {
							return false, fmt.Errorf("nodegc exited: %v\n%s", a.Err(), a.Tail(20))
						}
						at = time.Now()
						return a.Metric(ctx, "nodegc_owner_gc_synced") == 1, nil
					})
					return at, err
				}}
			if e.prof != nil {
				r.profileURL = cfg.MetricsURL
			}
			return r
		},
	}
}

// kcm runs kube-controller-manager with only its garbage collector, with
// --kube-api-qps=qps and --kube-api-burst=burst (its collector's client
// gets twice the QPS).
func kcm(qps float32, burst int32) collector {
	return collector{
		name:  fmt.Sprintf("kube-controller-manager qps=%gx2 burst=%d", qps, burst),
		short: "kcm",
		start: func(e *benchEnv) *running {
			e.b.Helper()
			began := time.Now()
			m := e.c.StartControllerManagerWith(e.b, cluster.ControllerManagerOptions{
				Controllers: []string{"garbagecollector"},
				Flags:       []string{fmt.Sprintf("--kube-api-qps=%g", qps), fmt.Sprintf("--kube-api-burst=%d", burst)},
			})
			stopped := false
			return &running{pid: m.PID(), logPath: m.LogPath(), began: began, gcStartLine: kcmGCStart,
				stop: func() {
					if !stopped {
						stopped = true
						m.Stop(e.b)
					}
				},
				waitSynced: func(ctx context.Context) (time.Time, error) {
					_, which, err := m.WaitLogLine(ctx, syncPoll, kcmSynced, kcmNotSynced)
					at := time.Now()
					if err == nil && which == 1 {
						err = fmt.Errorf("its garbage collector did not sync within its initial 30s: %q", kcmNotSynced)
					}
					return at, err
				}}
		},
	}
}

// logLineTime returns the time in the klog header ("I1123 22:49:21.123456")
// of the first line of the log at path that contains every one of substrs.
// klog writes local time without the year: near places it.
func logLineTime(path string, near time.Time, substrs ...string) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); containsAll(line, substrs) {
			return proc.KlogTime(line, near)
		}
	}
	return time.Time{}, false
}

func containsAll(s string, substrs []string) bool {
	for _, sub := range substrs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// kcmVersion is what kube-controller-manager --version prints.
func kcmVersion(e *benchEnv) string {
	out, err := exec.CommandContext(e.b.Context(), testbed.Binary(e.b, "kube-controller-manager"), "--version").Output()
	if err != nil {
		return "kube-controller-manager (version unknown)"
	}
	return strings.TrimSpace(string(out))
}
