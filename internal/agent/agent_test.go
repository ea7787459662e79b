package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/internal/version"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/images"
)

const ownerConfig = `apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
containerRuntimeEndpoint: unix:///nonexistent/nodegc-test/cri.sock
stateDirectory: %s
leaderElection:
  leaderElect: true
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
  resourceName: nodegc-test
  resourceNamespace: default
`

// TestLeaderElectionHandover: two `nodegc run --owner-gc=auto` processes
// against one API server. Exactly one leads; killing it (SIGKILL) hands the
// lease to the other, which finishes the cascade in progress. At no moment
// do both lead, and the one not leading makes no write.
func TestLeaderElectionHandover(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	a := startNodegc(t, "node-a", fmt.Sprintf(ownerConfig, t.TempDir()), "--owner-gc=auto", "--kubeconfig", c.KubeconfigPath())
	b := startNodegc(t, "node-b", fmt.Sprintf(ownerConfig, t.TempDir()), "--owner-gc=auto", "--kubeconfig", c.KubeconfigPath())
	procs := []*proc{a, b}
	leaders := func() []*proc {
		var ls []*proc
		for _, p := range procs {
			if p.metric("nodegc_owner_gc_leader") == 1 {
				ls = append(ls, p)
			}
		}
		return ls
	}
	testbed.WaitFor(t, time.Minute, "one leader", func() bool { return len(leaders()) == 1 })

	// Watch, for the whole test, that never both lead and that the one not
	// leading writes nothing.
	var (
		stop      = make(chan struct{})
		sampler   sync.WaitGroup
		violation atomic.Value
	)
	writes := func(p *proc) float64 {
		return p.metric("nodegc_owner_gc_api_requests_total", "verb=DELETE") + p.metric("nodegc_owner_gc_api_requests_total", "verb=PATCH")
	}
	sampler.Go(func() {
		last := map[*proc]float64{}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var leading []*proc
			for _, p := range procs {
				if p.metric("nodegc_owner_gc_leader") == 1 {
					leading = append(leading, p)
				}
			}
			if len(leading) > 1 {
				violation.Store("both instances reported leading at once")
			}
			for _, p := range procs {
				w := writes(p)
				if w > last[p] && w >= 0 && !contains(leading, p) && len(leading) == 1 {
					violation.Store(fmt.Sprintf("%s wrote while %s led", p.name, leading[0].name))
				}
				if w >= 0 {
					last[p] = w
				}
			}
		}
	})
	defer func() { close(stop); sampler.Wait() }()

	first := leaders()[0]
	// The runtime is unreachable on purpose (only the owner GC matters
	// here), so /readyz says 503; the owner GC's own gauge says synced.
	testbed.WaitFor(t, time.Minute, "the leader's owner GC to sync", func() bool { return first.metric("nodegc_owner_gc_synced") == 1 })

	// A cascade: one owner, 300 dependents.
	const n = 300
	owner, ref, remaining := cascade(t, c, n)
	// A dependent with a live second owner: it must survive the cascade.
	keeper, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "keeper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "two-owners", OwnerReferences: []metav1.OwnerReference{ref, {APIVersion: "v1", Kind: "ConfigMap", Name: keeper.Name, UID: keeper.UID}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client().CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	// Kill the leader in the middle of the cascade.
	testbed.WaitFor(t, time.Minute, "the cascade to start", func() bool { r := remaining(); return r >= 0 && r < n })
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.Done()
	left := remaining()
	t.Logf("killed %s with %d of %d dependents left", first.name, left, n)
	second := b
	if first == b {
		second = a
	}
	testbed.WaitFor(t, time.Minute, "the other instance to take the lease", func() bool { return second.metric("nodegc_owner_gc_leader") == 1 })
	// two-owners' patch is a work item of its own, which may come after
	// the last dependent's DELETE: the wait covers both (and ends if
	// two-owners is deleted, which the checks below report).
	twoOwners := func() (*corev1.ConfigMap, error) {
		return c.Client().CoreV1().ConfigMaps("default").Get(ctx, "two-owners", metav1.GetOptions{})
	}
	testbed.WaitFor(t, 2*time.Minute, "the cascade to finish and two-owners to lose the dangling reference", func() bool {
		if remaining() != 0 {
			return false
		}
		cm, err := twoOwners()
		return apierrors.IsNotFound(err) || err == nil && len(cm.OwnerReferences) == 1
	})
	if v := violation.Load(); v != nil {
		t.Error(v)
	}
	cm, err := twoOwners()
	if err != nil {
		t.Fatalf("the dependent with a live owner was deleted: %v", err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != keeper.UID {
		t.Errorf("two-owners owner references = %v, want only the live owner", cm.OwnerReferences)
	}
	if left == 0 || left == n {
		t.Logf("note: the leader was killed with %d of %d left; the hand-over still had to finish it", left, n)
	}
}

func contains(ps []*proc, p *proc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// TestSIGTERMDuringGC: SIGTERM while an image GC run removes images: the
// agent exits 0 within 10 s and leaves a valid state file.
func TestSIGTERMDuringGC(t *testing.T) {
	testbed.RequireRoot(t)
	n := node.Start(t, node.Options{Version: testbed.Containerd2, SmallFS: 256 << 20})
	ctx := t.Context()
	// One image stays in use by a running container: the state file must
	// still hold it after the shutdown.
	kept, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "term/kept", Tag: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.PullImage(ctx, kept.Ref); err != nil {
		t.Fatal(err)
	}
	pod, err := n.RunPod(ctx, node.PodSpec{Name: "keeps", Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: kept.Ref, Args: []string{"sleep"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: fmt.Sprintf("term/img%d", i), Tag: "v1",
			Layers: []registry.LayerSpec{{Seed: fmt.Sprintf("term-%d", i), Size: 1 << 20}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.PullImage(ctx, img.Ref); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := t.TempDir()
	cfg := nodeConfig(t, n.Endpoint, stateDir, nil,
		[]string{"highThresholdPercent: 1", "lowThresholdPercent: 0", "minimumGCAge: 0s", "diskCheckInterval: 1s"}, nil)
	p := startNodegc(t, "sigterm", cfg, "--owner-gc=off")
	testbed.WaitFor(t, time.Minute, "the first image removal", func() bool {
		return p.metric("nodegc_cri_requests_total", "method=RemoveImage") > 0
	})
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("nodegc did not exit within 10 s of SIGTERM")
	}
	t.Logf("exited %.1f s after SIGTERM (%v), after %v image removals", time.Since(start).Seconds(), p.Err(), p.metric("nodegc_cri_requests_total", "method=RemoveImage"))
	if p.Err() != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", p.Err())
	}
	if _, err := os.Stat(filepath.Join(stateDir, images.StateFileName)); err != nil {
		t.Fatalf("no state file after SIGTERM: %v", err)
	}
	tr, warn := images.NewTracker(stateDir, time.Now())
	if warn != nil {
		t.Errorf("state file after SIGTERM is not valid: %v", warn)
	}
	if _, ok := tr.Usage()[kept.ID()]; !ok {
		t.Errorf("state file after SIGTERM lacks the image in use %s: %v", kept.ID(), tr.Usage())
	}
}

// TestSIGHUPShutsDown: SIGHUP (a reload habit, or the hangup of a terminal
// that ran `nodegc run`) ends the agent as SIGTERM does: it shuts down and
// exits 0 (no exit 129 without a word, leaving its lease to expire), and
// says that a changed configuration needs a restart.
func TestSIGHUPShutsDown(t *testing.T) {
	cfg := nodeConfig(t, "unix://"+filepath.Join(t.TempDir(), "absent.sock"), t.TempDir(), nil, nil, nil)
	p := startNodegc(t, "sighup", cfg, "--owner-gc=off")
	if _, err := p.logLine("Cannot reach the container runtime"); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("nodegc did not exit within 10 s of SIGHUP")
	}
	if p.Err() != nil {
		t.Errorf("exit after SIGHUP: %v, want status 0", p.Err())
	}
	for _, want := range []string{"SIGHUP", "Shutting down"} {
		if _, err := p.logLine(want); err != nil {
			t.Errorf("the log after SIGHUP: no line with %q: %v", want, err)
		}
	}
}

// TestMetricsLint: /metrics of a running agent (node GC and owner GC) has
// every family nodegc documents and passes promlint, the linter behind
// `promtool check metrics`.
func TestMetricsLint(t *testing.T) {
	testbed.RequireRoot(t)
	c := cluster.Start(t, cluster.Options{})
	n := node.Start(t, node.Options{Version: testbed.Containerd2})
	cfg := fmt.Sprintf(ownerConfig, t.TempDir())
	cfg = strings.Replace(cfg, "unix:///nonexistent/nodegc-test/cri.sock", n.Endpoint, 1)
	cfg += fmt.Sprintf("containerGC:\n  podLogsDirectory: %s\n  containerLogsDirectory: %s\n", t.TempDir(), t.TempDir())
	p := startNodegc(t, "lint", cfg, "--owner-gc=auto", "--kubeconfig", c.KubeconfigPath())
	// Synced, not only leading: a leader's owner GC counts its first
	// request (discovery) a moment after it starts.
	testbed.WaitFor(t, time.Minute, "the agent to be ready, leading and its owner GC synced", func() bool {
		resp, err := http.Get(p.healthz + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && p.metric("nodegc_owner_gc_leader") == 1 &&
			p.metric("nodegc_owner_gc_synced") == 1
	})
	text := p.body(t, p.metrics+"/metrics")
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
	for _, family := range []string{
		"nodegc_image_gc_images_removed_total", "nodegc_image_gc_runs_total", "nodegc_image_gc_run_duration_seconds",
		"nodegc_image_gc_bytes_targeted_total", "nodegc_image_gc_bytes_estimated_freed_total", "nodegc_image_gc_bytes_measured_freed_total",
		"nodegc_image_fs_usage_percent", "nodegc_image_fs_capacity_bytes", "nodegc_image_fs_available_bytes",
		"nodegc_container_gc_runs_total", "nodegc_cri_requests_total",
		"nodegc_owner_gc_leader", "nodegc_owner_gc_api_requests_total", "nodegc_owner_gc_graph_nodes",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(text, "# TYPE "+family+" ") {
			t.Errorf("/metrics lacks %s", family)
		}
	}
	// What it runs: the version `nodegc version` prints and the digest of
	// its configuration (the test's file, bind addresses included), in
	// the metrics and the start-up log line.
	t.Run("info", func(t *testing.T) {
		v := version.Get()
		if got := p.metric("nodegc_build_info", "version="+v.Version, "revision="+v.Commit, "goversion="+v.GoVersion); got != 1 {
			t.Errorf("nodegc_build_info{version=%q,revision=%q,goversion=%q} = %v, want 1", v.Version, v.Commit, v.GoVersion, got)
		}
		loaded, err := config.LoadFile(p.Config.Path)
		if err != nil {
			t.Fatal(err)
		}
		digest, err := config.Digest(loaded.Config)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.metric("nodegc_config_info", "sha256="+digest); got != 1 {
			t.Errorf("nodegc_config_info{sha256=%q} = %v, want 1", digest, got)
		}
		line, err := p.logLine("nodegc agent started")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`version="` + v.Version + `"`, `revision="` + v.Commit + `"`, `configSHA256="` + digest + `"`} {
			if !strings.Contains(line, want) {
				t.Errorf("start-up log line %q lacks %s", line, want)
			}
		}
	})
	// The dashboard and alert rules of deploy/monitoring select what the
	// agent exports, and Prometheus evaluates them over this scrape.
	t.Run("monitoring", func(t *testing.T) { checkMonitoring(t, text, cfg, c.KubeconfigPath(), "lint") })
	// README.md's metrics reference names every nodegc family the agent
	// registers, with its type and labels, and the monitoring selects
	// only label values the agent sets; the families it says are exported
	// at 0 from the start are.
	t.Run("README", func(t *testing.T) {
		loaded, err := config.Decode([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		registered, err := agent.RegisteredMetrics(t.Context(), agent.Options{Config: loaded.Config, Kubeconfig: c.KubeconfigPath(),
			OwnerGC: agent.OwnerGCAuto, NodeName: "lint"})
		if err != nil {
			t.Fatal(err)
		}
		families, err := p.Scrape(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		scraped := map[string]*dto.MetricFamily{}
		for _, f := range families {
			scraped[f.GetName()] = f
		}
		checkMetricsReference(t, registered, scraped)
		checkExportedAtZero(t, registered)
	})
	// The debug graph shows objects with owner relationships: make one.
	ctx := t.Context()
	owner, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "graph-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "graph-dependent",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	graphURL := p.metrics + "/debug/controllers/garbagecollector/graph"
	testbed.WaitFor(t, 30*time.Second, "the debug graph to show the owner edge", func() bool {
		return strings.Contains(p.body(t, graphURL+"?uid="+string(owner.UID)), "->")
	})
	var dump struct {
		Nodes []json.RawMessage `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(p.body(t, graphURL+"?format=json")), &dump); err != nil || len(dump.Nodes) != 2 {
		t.Errorf("debug graph as JSON: %d nodes, %v; want the owner and its dependent", len(dump.Nodes), err)
	}
}

// readmeMetric is a metric as the README's reference table names it:
// `name` or `name{label,label}`.
var readmeMetric = regexp.MustCompile("`(nodegc_[a-z_]+)(?:\\{([a-z0-9_,]+)\\})?`")

// cascade creates, in namespace default, a ConfigMap "owner" and n
// ConfigMaps dep-NNNN labelled cascade=yes that it owns (blockOwnerDeletion
// set). It returns the owner, the reference to it, and a count of the
// dependents left (-1 when the list fails).
func cascade(t *testing.T, c *cluster.Cluster, n int) (*corev1.ConfigMap, metav1.OwnerReference, func() int) {
	t.Helper()
	ctx := t.Context()
	cms := c.Client().CoreV1().ConfigMaps("default")
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true)}
	for i := range n {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("dep-%04d", i), Labels: map[string]string{"cascade": "yes"}, OwnerReferences: []metav1.OwnerReference{ref},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	remaining := func() int {
		l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "cascade=yes"})
		if err != nil {
			return -1
		}
		return len(l.Items)
	}
	return owner, ref, remaining
}
