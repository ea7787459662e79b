package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// smallFS is the size of the node's image filesystem: small enough for a
// few dozen test images to fill it past the high threshold.
const smallFS = 512 * mib

// fillTarget is the usage the workload brings the image filesystem to at
// least: build-cache images top the catalog up where the filesystem has
// less overhead than ext4 (tmpfs when loop devices are unavailable).
const fillTarget = highThreshold + 6

// Deadlines of the waits on nodegc. They are generous: on a warm machine
// each wait ends in seconds.
const (
	readyTimeout   = 90 * time.Second // nodegc /readyz (runtime answers, owner GC caches synced)
	nodeGCTimeout  = 2 * time.Minute  // each wait on the node GC: disk and dead containers; a deleted Pod's leftovers
	cascadeTimeout = 90 * time.Second // ReplicaSet and Pods collected after the Deployment's deletion
	stopTimeout    = 10 * time.Second // nodegc's exit after SIGTERM
	pollEvery      = 250 * time.Millisecond
)

const totalSteps = 7

// demo holds everything the story starts and observes.
type demo struct {
	t         *demoTB
	root      string
	nodegcBin string
	keep      bool
	fsKind    string // node.Options.SmallFSKind
	began     time.Time
	dir       string // _output/demo/<time>: config, state, logs
	linkDir   string // container log links (the kubelet's /var/log/containers)

	cluster *cluster.Cluster
	node    *node.Node
	w       *workload
	cfg     *agentConfig
	agent   *agent

	before     *snapshot
	planBefore *planJSON
	after      *snapshot
	planAfter  *planJSON
	metrics    []*dto.MetricFamily

	nodeGCTook   time.Duration // nodegc start → node GC done
	reportGoneIn time.Duration // report pod deleted → its leftovers gone
	cascadeTook  time.Duration // Deployment deleted → ReplicaSet and Pods gone
	webCleanTook time.Duration // Deployment deleted → web pods' leftovers gone on the node
	checks       []check

	usage    *usageRecorder // the image filesystem's usage and nodegc's GC runs, for the plot
	plotPath string         // the usage plot, written by the report
}

func (d *demo) ctx() context.Context { return d.t.Context() }

// step prints a step's title and what it shows.
func (d *demo) step(n int, title string, why ...string) {
	el := time.Since(d.began).Round(time.Second)
	say("[demo]")
	say("[demo] ━━ Step %d/%d (%d:%02d) %s", n, totalSteps, int(el.Minutes()), int(el.Seconds())%60, title)
	for _, w := range why {
		say("[demo]    %s", w)
	}
}

func info(format string, args ...any) { say("[demo]    "+format, args...) }

// must stops the demo on err, saying what failed; the context's end (Ctrl-C)
// is reported as such.
func (d *demo) must(err error, what string) {
	if err == nil {
		return
	}
	if d.t.Context().Err() != nil {
		say("[demo] interrupted during: %s", what)
		d.t.fail()
		runtime.Goexit()
	}
	d.t.Fatalf("%s: %v", what, err)
}

func (d *demo) run(t *demoTB) {
	d.t, d.began = t, time.Now()
	say("[demo] nodegc demo: a throw-away node and control plane, a full disk, and nodegc cleaning up (Ctrl-C stops it and tears everything down)")
	d.makeDir()
	d.stepInfrastructure()
	d.stepWorkload()
	d.stepPlan()
	d.stepRun()
	d.stepCascade()
	d.stepReport()
	if d.keep {
		d.keepUp()
	}
	d.stepStop()
	d.summary()
}

// makeDir creates this run's directory under _output/demo, keeping the
// last few runs' directories (their logs) and removing older ones.
func (d *demo) makeDir() {
	base := filepath.Join(d.root, "_output", "demo")
	d.must(os.MkdirAll(base, 0o755), "create "+base)
	old, _ := filepath.Glob(filepath.Join(base, "20*"))
	slices.Sort(old)
	for len(old) > 4 {
		os.RemoveAll(old[0])
		old = old[1:]
	}
	d.dir = filepath.Join(base, time.Now().Format("20060102-150405"))
	d.linkDir = filepath.Join(d.dir, "containers")
	d.must(os.MkdirAll(d.linkDir, 0o755), "create "+d.linkDir)
	say("[demo] files of this run (nodegc config, state and logs): %s", d.dir)
}

func (d *demo) stepInfrastructure() {
	d.step(1, "Start a throw-away control plane and node",
		"etcd + kube-apiserver (no controller-manager: nothing but nodegc collects anything), and a",
		"containerd 2.x whose root is a small loop-mounted ext4, with a local registry; a Node object for it.")
	d.cluster = cluster.Start(d.t, cluster.Options{})
	d.node = node.Start(d.t, node.Options{Version: testbed.Containerd2, SmallFS: smallFS, SmallFSKind: d.fsKind})
	if d.node.FSKind != "loop-ext4" {
		info("note: the image filesystem is %s, not a loop-mounted ext4; the workload is topped up to reach the high threshold", d.node.FSKind)
	}
	d.must(createNamespaces(d.ctx(), d.cluster.Client()), "create namespaces")
	d.must(createNode(d.ctx(), d.cluster.Client(), nodeName), "register the node")
	st, err := d.node.FSStats()
	d.must(err, "statfs of the image filesystem")
	info("kube-apiserver %s; containerd %s; image filesystem %s: %s capacity, usage %d%%",
		d.cluster.URL, d.node.Endpoint, d.node.FSKind, mibs(st.Capacity), usagePercent(st))
	info("Node %q registered; namespaces %s, %s, %s (workload) and %s (nodegc's Lease)", nodeName, nsShop, nsOps, nsBatch, nsNodegc)
}

func (d *demo) stepWorkload() {
	d.step(2, "Create a realistic workload",
		fmt.Sprintf("%d images of varied sizes sharing base layers (an OS base, Python, Node.js, a JRE, a CI toolchain),", len(catalog)),
		"pulled onto the node; Pods in the API bound to the node, whose sandboxes carry the Pods' UIDs.")
	d.usage = startUsageRecorder(d.ctx(), d.node, fmt.Sprintf("nodegc demo: image filesystem usage (%s, %s)", d.node.FSKind, d.node.Root))
	d.t.Cleanup(func() { d.usage.stop() })
	began := time.Now()
	imgs, err := pushImages(d.ctx(), d.node.Registry)
	d.must(err, "push the images to the local registry")
	d.w = &workload{images: imgs, pause: d.node.Pause}
	info("pushed %d images to the local registry in %v", len(imgs), time.Since(began).Round(100*time.Millisecond))
	began = time.Now()
	d.must(pullImages(d.ctx(), d.node, imgs), "pull the images onto the node")
	st, _ := d.node.FSStats()
	info("pulled them onto the node in %v: image filesystem usage %d%% (%s of %s available)",
		time.Since(began).Round(100*time.Millisecond), usagePercent(st), mibs(st.Available), mibs(st.Capacity))
	if added := d.topUp(imgs); added > 0 {
		st, _ = d.node.FSStats()
		info("topped up with %d ci/build-cache images: usage %d%%", added, usagePercent(st))
	}

	d.must(d.w.createAPIObjects(d.ctx(), d.cluster.Client()), "create the API objects")
	d.must(d.w.runOnNode(d.ctx(), d.node, d.linkDir), "run the pods on the node")
	d.must(d.w.reportStatus(d.ctx(), d.cluster.Client()), "report the pods' status")
	info("workload (in the API and on the node):")
	info("  Deployment %s/web → ReplicaSet %s → Pods %s, %s: running %s",
		nsShop, d.w.replicaSet.Name, d.w.web[0].obj.Name, d.w.web[1].obj.Name, repoTag(d.w.web[0].image))
	info("  Pod %s: running %s", d.w.cart.name(), repoTag(d.w.cart.image))
	info("  Pod %s: running %s", d.w.logAgent.name(), repoTag(d.w.logAgent.image))
	info("  Pod %s: crash-looping, restarted %d times: %d exited instances (attempts 0..%d) + the running attempt %d",
		d.w.worker.name(), workerRestarts, workerRestarts, workerRestarts-1, workerRestarts)
	info("  Pod %s: a finished batch job (exited container, stopped sandbox); deleted from the API once nodegc runs",
		d.w.report.name())
	info("  %d other images are used by no container (old rollouts, CI, debugging); %s is excluded by the config",
		len(imgs)-5, excludePattern)

	snap, err := d.snapshot()
	d.must(err, "observe the node")
	d.before = snap
	info("image filesystem usage now: %d%% (%s available of %s); nodegc's thresholds: high %d%%, low %d%%",
		snap.usage, mibs(snap.fs.Available), mibs(snap.fs.Capacity), highThreshold, lowThreshold)
	if snap.usage < highThreshold {
		d.t.Fatalf("the workload filled the image filesystem to %d%% only, below the high threshold %d%%: nodegc would have nothing to do. "+
			"Is the filesystem %s rather than loop-ext4 (see above)? Adjust smallFS in hack/demo/story.go", snap.usage, highThreshold, d.node.FSKind)
	}
}

// topUp pulls build-cache images until usage reaches fillTarget, and
// returns how many it added.
func (d *demo) topUp(imgs map[string]*registry.Image) int {
	const most = 30
	for i := 1; ; i++ {
		st, err := d.node.FSStats()
		d.must(err, "statfs of the image filesystem")
		if usagePercent(st) >= fillTarget {
			return i - 1
		}
		if i > most {
			d.t.Fatalf("%d build-cache images did not bring the image filesystem to %d%% (usage %d%%): adjust smallFS in hack/demo/story.go",
				most, fillTarget, usagePercent(st))
		}
		spec := registry.ImageSpec{Repo: "ci/build-cache", Tag: fmt.Sprintf("run-%d", i),
			Layers: []registry.LayerSpec{baseToolbox, app(fmt.Sprintf("build-cache-%d", i), 6*mib)}}
		img, err := d.node.Registry.Push(d.ctx(), spec)
		d.must(err, "push a build-cache image")
		_, err = d.node.PullImage(d.ctx(), img.Ref)
		d.must(err, "pull a build-cache image")
		imgs[spec.Repo+":"+spec.Tag] = img
	}
}

func (d *demo) stepPlan() {
	d.step(3, "Ask nodegc what it would do: `nodegc plan` (reads only, removes nothing)")
	cfg, err := newAgentConfig(d.dir, d.nodegcBin, d.node.Endpoint, d.node.PodLogs, d.linkDir, d.cluster.KubeconfigPath())
	d.must(err, "write the nodegc config")
	d.cfg = cfg
	info("config: %s", cfg.configPath)
	out, err := cfg.plan(d.ctx())
	d.must(err, "run nodegc plan")
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		say("[demo]    │ %s", line)
	}
	d.planBefore, err = cfg.planJSON(d.ctx())
	d.must(err, "run nodegc plan -o json")
}

func (d *demo) stepRun() {
	d.step(4, "Run nodegc: `nodegc run --owner-gc=auto`",
		"Image GC (disk checked every 2s), container GC (every 5s) and, once elected, the owner GC.",
		"A stand-in for the kubelet confirms the deletion of Pods marked for deletion on the node (it stops their sandboxes; it removes nothing).")
	kctx, stopKubelet := context.WithCancel(d.ctx())
	kdone := make(chan struct{})
	go func() {
		defer close(kdone)
		newKubeletStandIn(d.cluster.Client(), d.node).run(kctx)
	}()
	d.t.Cleanup(func() {
		stopKubelet()
		<-kdone
	})

	say("[demo]    before:  usage %d%% (%s available), %d images; worker: %d dead instances",
		d.before.usage, mibs(d.before.fs.Available), len(d.before.images), len(d.before.containersOf(d.w.worker, exitedOnly)))
	started := time.Now()
	a, err := startAgent(d.cfg)
	d.must(err, "start nodegc")
	d.agent = a
	d.usage.event("nodegc started")
	d.usage.watchRuns(a.Scrape)
	d.t.Cleanup(func() {
		wasRunning := !a.Exited()
		code, _, killed, err := a.stop(stopTimeout) // also checks the log of an exited nodegc
		if wasRunning {
			say("[demo] stopped nodegc (pid %d): exit code %d, killed: %v", a.PID(), code, killed)
		}
		if err != nil {
			d.t.Errorf("stopping nodegc: %v", err)
		}
	})
	info("nodegc pid %d; log: %s", a.PID(), d.cfg.logPath)
	d.must(a.waitHTTP(d.ctx(), d.cfg.healthzURL, 30*time.Second), "wait for nodegc /healthz")
	d.must(a.waitHTTP(d.ctx(), d.cfg.readyzURL, readyTimeout), "wait for nodegc /readyz")
	info("nodegc ready after %v (/readyz: the runtime answers; the owner GC's caches are synced)", time.Since(started).Round(100*time.Millisecond))

	info("watching the node until usage ≤ %d%% and the worker's dead instances are trimmed to 1 (deadline %v):", lowThreshold, nodeGCTimeout)
	d.must(d.watchNode("nodegc's image and container GC", started, func(s *snapshot) (bool, string) {
		dead := len(s.containersOf(d.w.worker, exitedOnly))
		return s.usage <= lowThreshold && dead == 1, fmt.Sprintf("usage %d%% (%s available), %d images; worker: %d dead instance(s)",
			s.usage, mibs(s.fs.Available), len(s.images), dead)
	}), "wait for nodegc to free the disk and trim the dead containers")
	d.nodeGCTook = time.Since(started)
	info("disk freed and dead containers trimmed %v after nodegc started", d.nodeGCTook.Round(100*time.Millisecond))

	// The pod view must be authoritative before a Pod's deletion means
	// "gone" to nodegc; the deletion is then seen by its watch.
	d.must(d.waitFor("nodegc's view of the node's Pods to be authoritative", 30*time.Second, func() (bool, string) {
		m, err := a.Scrape(d.ctx())
		if err != nil {
			return false, err.Error()
		}
		v, ok := testbed.MetricSum(m, "nodegc_container_gc_pod_view_authoritative")
		return ok && v == 1, fmt.Sprintf("nodegc_container_gc_pod_view_authoritative=%v", v)
	}), "wait for nodegc's pod view")
	info("deleting the finished Pod %s from the API (as `kubectl delete pod` would); watching its leftovers on the node:", d.w.report.name())
	deleted := time.Now()
	d.usage.event("Pod " + d.w.report.obj.Name + " deleted")
	d.must(d.cluster.Client().CoreV1().Pods(d.w.report.obj.Namespace).Delete(d.ctx(), d.w.report.obj.Name, metav1.DeleteOptions{}),
		"delete the report Pod")
	d.must(d.watchNode("the deleted Pod's leftovers to be removed", deleted, func(s *snapshot) (bool, string) {
		left := d.leftovers(s, d.w.report)
		return left == "", orNone(left, "nothing left")
	}), "wait for nodegc to remove the deleted Pod's container, sandbox and log directory")
	d.reportGoneIn = time.Since(deleted)
	info("its container, sandbox, log directory and log link removed by nodegc %v after the deletion", d.reportGoneIn.Round(100*time.Millisecond))
}

// watchNode polls the node until cond holds (deadline nodeGCTimeout),
// printing cond's description of the node whenever it changes, with the
// time since since.
func (d *demo) watchNode(what string, since time.Time, cond func(*snapshot) (bool, string)) error {
	var last string
	var lastPrint time.Time
	return d.waitFor(what, nodeGCTimeout, func() (bool, string) {
		s, err := d.snapshot()
		if err != nil {
			return false, err.Error()
		}
		ok, line := cond(s)
		if line != last || time.Since(lastPrint) > 10*time.Second {
			say("[demo]    t+%4.1fs  %s", time.Since(since).Seconds(), line)
			last, lastPrint = line, time.Now()
		}
		return ok, line
	})
}

func (d *demo) stepCascade() {
	d.step(5, "Delete the Deployment (propagationPolicy=Background) and watch nodegc's owner GC collect its dependents",
		"The API server deletes the Deployment at once; its ReplicaSet and Pods are left to a garbage collector,",
		"and nodegc's is the only one running. Then the node side: the Pods' containers, sandboxes and log directories.")
	c := d.cluster.Client()
	rs, pods := d.w.replicaSet, d.w.web
	began := time.Now()
	d.usage.event("Deployment web deleted")
	d.must(c.AppsV1().Deployments(nsShop).Delete(d.ctx(), d.w.deployment.Name, metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	}), "delete the Deployment")
	var last string
	d.must(d.waitFor("the ReplicaSet and Pods to be collected", cascadeTimeout, func() (bool, string) {
		left := d.apiLeftovers()
		if left != last {
			say("[demo]    t+%4.1fs  %s", time.Since(began).Seconds(), orNone(left, "ReplicaSet and Pods gone"))
			last = left
		}
		return left == "", left
	}), "wait for the owner cascade")
	d.cascadeTook = time.Since(began)
	info("ReplicaSet %s/%s and Pods %s, %s collected %v after the Deployment's deletion",
		nsShop, rs.Name, pods[0].obj.Name, pods[1].obj.Name, d.cascadeTook.Round(100*time.Millisecond))

	d.must(d.watchNode("the web Pods' leftovers on the node to be removed", began, func(s *snapshot) (bool, string) {
		var left []string
		for _, p := range pods {
			if l := d.leftovers(s, p); l != "" {
				left = append(left, p.obj.Name+": "+l)
			}
		}
		return len(left) == 0, orNone(strings.Join(left, "; "), "nothing left on the node")
	}), "wait for the node-side cleanup of the web Pods")
	d.webCleanTook = time.Since(began)
	info("their containers, sandboxes, log directories and log links removed by nodegc's container GC %v after the Deployment's deletion",
		d.webCleanTook.Round(100*time.Millisecond))
}

// apiLeftovers says which of the ReplicaSet and its Pods still exist.
func (d *demo) apiLeftovers() string {
	c := d.cluster.Client()
	var left []string
	if rs, err := c.AppsV1().ReplicaSets(nsShop).Get(d.ctx(), d.w.replicaSet.Name, metav1.GetOptions{}); err == nil && rs.UID == d.w.replicaSet.UID {
		left = append(left, "ReplicaSet "+rs.Name+deleting(rs.DeletionTimestamp))
	} else if err != nil && !isNotFound(err) {
		left = append(left, "ReplicaSet ? ("+err.Error()+")")
	}
	for _, p := range d.w.web {
		if got, err := c.CoreV1().Pods(nsShop).Get(d.ctx(), p.obj.Name, metav1.GetOptions{}); err == nil && got.UID == p.obj.UID {
			left = append(left, "Pod "+got.Name+deleting(got.DeletionTimestamp))
		} else if err != nil && !isNotFound(err) {
			left = append(left, "Pod ? ("+err.Error()+")")
		}
	}
	if len(left) == 0 {
		return ""
	}
	return "still there: " + strings.Join(left, ", ")
}

func deleting(ts *metav1.Time) string {
	if ts != nil {
		return " (being deleted)"
	}
	return ""
}

// keepUp leaves everything running until Ctrl-C (DEMO_KEEP=1).
func (d *demo) keepUp() {
	say("[demo]")
	say("[demo] DEMO_KEEP=1: everything stays up until Ctrl-C. To look around:")
	say("[demo]    kubeconfig:    %s", d.cluster.KubeconfigPath())
	say("[demo]                   e.g. %s --kubeconfig %s get nodes,pods -A", filepath.Join(testbed.ToolsDir(), "bin", "kubectl"), d.cluster.KubeconfigPath())
	say("[demo]    CRI endpoint:  %s", d.node.Endpoint)
	say("[demo]                   e.g. %s --runtime-endpoint %s images", filepath.Join(testbed.ToolsDir(), "bin", "crictl"), d.node.Endpoint)
	say("[demo]    nodegc:        pid %d, log %s, config %s", d.agent.PID(), d.cfg.logPath, d.cfg.configPath)
	say("[demo]    metrics:       %s", d.cfg.metricsURL)
	say("[demo]    health:        %s  %s", d.cfg.healthzURL, d.cfg.readyzURL)
	say("[demo]    owner graph:   %s", d.cfg.debugURL)
	say("[demo]    plan:          NODE_NAME=%s %s plan -c %s --kubeconfig %s", nodeName, d.nodegcBin, d.cfg.configPath, d.cluster.KubeconfigPath())
	say("[demo] Press Ctrl-C to stop nodegc and tear everything down.")
	<-d.ctx().Done()
}

func (d *demo) stepStop() {
	d.step(7, "Stop nodegc with SIGTERM; it must exit 0")
	code, took, killed, err := d.agent.stop(stopTimeout)
	ok := code == 0 && !killed && err == nil
	detail := fmt.Sprintf("exit code %d after %v", code, took.Round(10*time.Millisecond))
	if killed {
		detail = fmt.Sprintf("still running %v after SIGTERM: killed", stopTimeout)
	}
	if err != nil {
		detail += fmt.Sprintf("; %v", err)
	}
	d.checks = append(d.checks, check{"nodegc exits 0 on SIGTERM, within " + stopTimeout.String(), ok, detail})
	info("nodegc (pid %d): %s", d.agent.PID(), detail)
	if !ok {
		info("last lines of its log (%s):", d.cfg.logPath)
		for _, l := range strings.Split(d.agent.Tail(15), "\n") {
			say("[demo]    │ %s", l)
		}
	}
}

// waitFor polls cond every pollEvery until it holds, ctx ends, or timeout;
// the error says what was awaited and the last state cond reported.
func (d *demo) waitFor(what string, timeout time.Duration, cond func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(d.ctx(), timeout)
	defer cancel()
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		if d.agent != nil && d.agent.Exited() {
			return fmt.Errorf("nodegc exited (%v) while waiting for %s; last lines of its log (%s):\n%s", d.agent.Err(), what, d.cfg.logPath, d.agent.Tail(20))
		}
		select {
		case <-ctx.Done():
			if d.ctx().Err() != nil {
				return d.ctx().Err()
			}
			msg := fmt.Sprintf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
			if d.agent != nil {
				msg += fmt.Sprintf("\nnodegc's log is %s; its last lines:\n%s", d.cfg.logPath, d.agent.Tail(20))
			}
			return fmt.Errorf("%s", msg)
		case <-time.After(pollEvery):
		}
	}
}

func orNone(s, none string) string {
	if s == "" {
		return none
	}
	return s
}
