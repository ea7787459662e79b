package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/images"
)

// TestPlanViewContainerBytes: every container GC removal shows the bytes
// it frees (a container's writable layer and logs, a sandbox's layer, a pod
// log directory's rest), what is kept and log links show none, the
// collector's totals add them up, and a runtime without writable-layer
// bytes says why.
func TestPlanViewContainerBytes(t *testing.T) {
	c := containers.Container{ID: "c1", PodNamespace: "ns", PodName: "p", Name: "app", State: containers.StateExited}
	p := &containers.Plan{
		PodsAuthoritative: true,
		RemoveContainers: []containers.ContainerDecision{{Container: c, Reason: containers.ReasonPodGone,
			WritableLayerBytes: 8 << 20, LogBytes: 1 << 20}},
		KeepContainers:  []containers.ContainerDecision{{Container: containers.Container{ID: "c2"}, Reason: containers.KeepRunning}},
		RemoveSandboxes: []containers.SandboxDecision{{Sandbox: containers.Sandbox{ID: "s1"}, Reason: containers.ReasonPodGone, WritableLayerBytes: 4096}},
		RemoveLogDirs:   []containers.LogDirDecision{{Dir: containers.PodLogDir{Name: "ns_p_u"}, Reason: containers.ReasonPodGone, Bytes: 2 << 20}},
		RemoveLogLinks:  []containers.LogLinkDecision{{Link: containers.LogLink{Name: "x.log"}, Reason: containers.ReasonDangling}},
	}
	v := newPlanView(&agent.PlanReport{Node: "n", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	type row struct {
		Bytes, Layer, Logs *uint64
	}
	got := map[string]row{}
	for _, rs := range [][]containerRow{v.Containers, v.Sandboxes, v.LogDirs, v.LogLinks} {
		for _, r := range rs {
			got[r.Action+" "+r.ID+r.Name] = row{r.Bytes, r.WritableLayerBytes, r.LogBytes}
		}
	}
	u := func(n uint64) *uint64 { return &n }
	want := map[string]row{
		"remove c1ns/p app #0 (exited)": {u(9 << 20), u(8 << 20), u(1 << 20)},
		"keep c2/  #0 ()":               {},
		"remove s1/ #0":                 {u(4096), u(4096), nil},
		"remove ns_p_u":                 {Bytes: u(2 << 20)},
		"remove x.log":                  {},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	wantTotals := &containerBytesView{WritableLayerBytes: 8<<20 + 4096, ContainerLogBytes: 1 << 20, PodLogDirectoryBytes: 2 << 20,
		TotalBytes: 11<<20 + 4096}
	if diff := cmp.Diff(wantTotals, v.ContainerBytes); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	v.print(&out)
	for _, line := range []string{
		"CONTAINER GC: planned removals free 11.0 MiB (writable layers 8.0 MiB, container logs 1.0 MiB, pod log directories 2.0 MiB)",
		"remove  pod_gone  9.0 MiB  c1",
		"keep    running   -        c2",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("the printed plan lacks %q:\n%s", line, out.String())
		}
	}
	if strings.Contains(out.String(), "unknown") {
		t.Errorf("the printed plan says writable-layer bytes are unknown:\n%s", out.String())
	}

	p.WritableLayersUnknown = "runtime cri-o"
	out.Reset()
	newPlanView(&agent.PlanReport{Containers: p}, ptr.To[int32](85), ptr.To[int32](80)).print(&out)
	if !strings.Contains(out.String(), "writable-layer bytes unknown: runtime cri-o") {
		t.Errorf("the printed plan does not say why writable layers count 0:\n%s", out.String())
	}
}

// TestPlanSaysWhenRunWouldRemoveNothing: with imageGC.dryRun or
// containerGC.dryRun on, `nodegc run` logs its removals and makes none, so
// a plan that lists "remove" rows says so, in the tables and the JSON.
func TestPlanSaysWhenRunWouldRemoveNothing(t *testing.T) {
	for name, tc := range map[string]struct {
		image, containers bool
		want              []string
	}{
		"neither":    {},
		"image GC":   {image: true, want: []string{"imageGC.dryRun"}},
		"both":       {image: true, containers: true, want: []string{"imageGC.dryRun", "containerGC.dryRun"}},
		"containers": {containers: true, want: []string{"containerGC.dryRun"}},
	} {
		t.Run(name, func(t *testing.T) {
			v := newPlanView(&agent.PlanReport{Node: "n", Runtime: "containerd 2"}, ptr.To[int32](85), ptr.To[int32](80))
			v.setDryRun(tc.image, tc.containers)
			if diff := cmp.Diff(tc.want, v.DryRun); diff != "" {
				t.Errorf("dryRun (-want +got):\n%s", diff)
			}
			var out bytes.Buffer
			v.print(&out)
			first, _, _ := strings.Cut(out.String(), "\n\n")
			for _, f := range tc.want {
				if !strings.Contains(first, f) {
					t.Errorf("the plan's head does not name %s:\n%s", f, first)
				}
			}
			if len(tc.want) == 0 && strings.Contains(first, "dryRun") {
				t.Errorf("the plan's head speaks of dry run with none on:\n%s", first)
			}
		})
	}
}

// TestPlanNamesPodsTheAPIDoesNotList: when the runtime runs pods that the
// API server does not list for this node (a wrong node name), the plan says
// the pod view is not authoritative and names those pods, in the tables
// and the JSON, so the operator sees which node name is wrong. In an
// authoritative view, it names them as deleted while they run.
func TestPlanNamesPodsTheAPIDoesNotList(t *testing.T) {
	p := &containers.Plan{PodsReason: containers.ViewDisagrees, PodsNode: "node-b",
		PodsMissing: []containers.PodRef{{UID: "u1", Namespace: "ns", Name: "web-0"}, {UID: "u2", Namespace: "kube-system", Name: "proxy"}},
		PodsLease:   "node lease of node-b stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)"}
	v := newPlanView(&agent.PlanReport{Node: "node-b", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	if diff := cmp.Diff([]string{"ns/web-0 (u1)", "kube-system/proxy (u2)"}, v.PodsMissing); diff != "" {
		t.Errorf("podsMissingFromAPI (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	v.print(&out)
	for _, want := range []string{
		`POD VIEW: not authoritative (` + containers.ViewDisagrees + `): nothing is removed because its pod is gone [node "node-b"]`,
		"the runtime runs pods the API server does not list for this node: ns/web-0 (u1), kube-system/proxy (u2)",
		"pods the view lists run here, but do not show it is this node's: node lease of node-b stale since 2026-11-21T11:58:40Z",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}

	// The view is authoritative (a pod it lists runs here): the pods it
	// lacks were deleted from the API while they run.
	p.PodsAuthoritative, p.PodsReason, p.PodsLease = true, "", ""
	out.Reset()
	newPlanView(&agent.PlanReport{Node: "node-b", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80)).print(&out)
	for _, want := range []string{
		`POD VIEW: authoritative [node "node-b"]`,
		"the runtime runs pods the API server no longer has (deleted while they run: force-deleted?), kept as running: ns/web-0 (u1), kube-system/proxy (u2)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPlanSaysTheNodeLeaseIsStale: when the plan would remove something
// as pod_gone but the Node's lease is not fresh (the kubelet is down, or
// the machine runs under another node name now), the plan says the view is
// not authoritative, and why, in the tables and the JSON (nodeLease).
func TestPlanSaysTheNodeLeaseIsStale(t *testing.T) {
	why := "node lease of node-b stale since 2026-11-21T11:58:40Z (renewed 2026-11-21T11:58:00Z, for 40s)"
	p := &containers.Plan{PodsReason: containers.ViewNodeLeaseStale, PodsNode: "node-b", PodsLease: why}
	v := newPlanView(&agent.PlanReport{Node: "node-b", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	if v.NodeLease != why {
		t.Errorf("nodeLease %q, want %q", v.NodeLease, why)
	}
	var out bytes.Buffer
	v.print(&out)
	for _, want := range []string{
		`POD VIEW: not authoritative (` + containers.ViewNodeLeaseStale + `): nothing is removed because its pod is gone [node "node-b"]`,
		"the Node's lease is not renewed (its kubelet down, or running under another node name), or nodegc may not read it (RBAC: get on leases in kube-node-lease): " + why,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "pods the view lists run here") {
		t.Errorf("plan output speaks of pods that run here:\n%s", out.String())
	}
}

// TestPlanNamesPodsTheRuntimeLacks: when the runtime lists none of the pods
// the kubelet reports running (nodegc asks another runtime), the plan says
// the pod view is not authoritative, names those pods in the tables and
// the JSON, and points at containerRuntimeEndpoint.
func TestPlanNamesPodsTheRuntimeLacks(t *testing.T) {
	p := &containers.Plan{PodsReason: containers.ViewRuntimeLacksPods, PodsNode: "node-b",
		PodsNotInRuntime: []containers.PodRef{{UID: "u1", Namespace: "ns", Name: "web-0"}}}
	v := newPlanView(&agent.PlanReport{Node: "node-b", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	if diff := cmp.Diff([]string{"ns/web-0 (u1)"}, v.PodsNotInRuntime); diff != "" {
		t.Errorf("podsNotInRuntime (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	v.print(&out)
	for _, want := range []string{
		`POD VIEW: not authoritative (` + containers.ViewRuntimeLacksPods + `): nothing is removed because its pod is gone [node "node-b"]`,
		"the runtime (containerd 2) lists no sandbox of the pods the API server says run on this node: ns/web-0 (u1)",
		"containerRuntimeEndpoint",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPlanNamesTheNodesRuntime: when the Node's kubelet reports another
// runtime than the one nodegc asks, the plan says the pod view is not
// authoritative, names both runtimes in the tables and the JSON, and
// points at containerRuntimeEndpoint.
func TestPlanNamesTheNodesRuntime(t *testing.T) {
	p := &containers.Plan{PodsReason: containers.ViewNodeOtherRuntime, PodsNode: "node-b",
		NodeRuntime: "containerd://1.7.23-k3s2", Runtime: "containerd://1.7.24"}
	v := newPlanView(&agent.PlanReport{Node: "node-b", Runtime: "containerd v1.7.24", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	if v.NodeRuntime != "containerd://1.7.23-k3s2" {
		t.Errorf("nodeRuntime %q, want containerd://1.7.23-k3s2", v.NodeRuntime)
	}
	var out bytes.Buffer
	v.print(&out)
	for _, want := range []string{
		`POD VIEW: not authoritative (` + containers.ViewNodeOtherRuntime + `): nothing is removed because its pod is gone [node "node-b"]`,
		"the Node's kubelet reports another container runtime (containerd://1.7.23-k3s2) than the one nodegc asks (containerd v1.7.24)",
		"containerRuntimeEndpoint",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPlanSaysWhoRunsNodeGC: the plan's head says whether a nodegc runs
// node GC on this state directory now, and who; its JSON too.
func TestPlanSaysWhoRunsNodeGC(t *testing.T) {
	for name, tc := range map[string]struct {
		report agent.PlanReport
		head   string
	}{
		"running": {agent.PlanReport{NodeGCRunning: true, NodeGCHolder: "pod nodegc/nodegc-node-x (pid 1) since 2026-11-29T04:00:00Z"},
			"Node GC here: run by pod nodegc/nodegc-node-x (pid 1) since 2026-11-29T04:00:00Z"},
		"running, holder unknown": {agent.PlanReport{NodeGCRunning: true},
			"Node GC here: run by an unknown nodegc (nodegc.lock names none: its holder could not write it, as in a full or read-only state directory)"},
		"not running": {agent.PlanReport{}, "Node GC here: no nodegc runs it now"},
		"unknown":     {agent.PlanReport{NodeGCErr: errors.New("open /var/lib/nodegc: permission denied")}, "Node GC here: unknown (open /var/lib/nodegc: permission denied)"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.report.Node, tc.report.Runtime = "n", "containerd 2"
			v := newPlanView(&tc.report, ptr.To[int32](85), ptr.To[int32](80))
			var out bytes.Buffer
			v.print(&out)
			if first, _, _ := strings.Cut(out.String(), "\n\n"); !strings.Contains(first, tc.head) {
				t.Errorf("the plan's head does not say %q:\n%s", tc.head, first)
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				NodeGC struct {
					Running bool   `json:"running"`
					Holder  string `json:"holder"`
				} `json:"nodeGC"`
			}
			if err := json.Unmarshal(b, &got); err != nil || got.NodeGC.Running != tc.report.NodeGCRunning || got.NodeGC.Holder != tc.report.NodeGCHolder {
				t.Errorf("JSON nodeGC = %+v (%v), want running %v, holder %q", got.NodeGC, err, tc.report.NodeGCRunning, tc.report.NodeGCHolder)
			}
		})
	}
}

// TestPlanShowsWhatACollectionUnderWayRemoves: between the thresholds, the
// plan's table and JSON show what the agent removes if a collection is
// under way, and say that the agent also collects ahead of a fast fill.
func TestPlanShowsWhatACollectionUnderWayRemoves(t *testing.T) {
	disk := images.DiskStats{Capacity: 100 << 20, Available: 10 << 20}
	a := &images.Image{ID: "sha256:aaaaaaaaaaaaaaaa", RepoTags: []string{"registry.example/a:1"}}
	r := &agent.PlanReport{Node: "n", Runtime: "containerd 2",
		Images:      &images.Plan{Disk: disk, UsagePercent: 90, Keep: []images.Decision{{Image: a, Reason: images.KeepNotNeeded}}},
		ImagesToLow: &images.Plan{Disk: disk, UsagePercent: 90, Target: 5 << 20, BytesToFree: 5 << 20, EstimatedFreed: 6 << 20, Remove: []images.Decision{{Image: a, Reason: images.ReasonSpace, Bytes: 6 << 20}}},
	}
	v := newPlanView(r, ptr.To[int32](95), ptr.To[int32](85))
	var out bytes.Buffer
	v.print(&out)
	for _, want := range []string{"if a collection is under way (usage reached 95% and has not been under 85% since", "registry.example/a:1", "trigger projected"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, out.String())
		}
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"ifCollecting":{"bytesToFree":5242880,"estimatedFreedBytes":6291456,"remove":["registry.example/a:1 (aaaaaaaaaaaa)"]}`) {
		t.Errorf("JSON: %s", js)
	}
	v = newPlanView(&agent.PlanReport{Node: "n", Images: r.Images}, ptr.To[int32](95), ptr.To[int32](85))
	if v.Disk.IfCollecting != nil {
		t.Errorf("without a plan to low: %+v", v.Disk.IfCollecting)
	}
}

// TestPlanSaysWhenPodLogsAreUnseen: when nodegc does not see a running
// container's log under podLogsDirectory (its view of it is not the
// kubelet's), the plan says so, in the tables and the JSON, and why it
// then keeps links, log directories and containers (kept as logs_unseen).
func TestPlanSaysWhenPodLogsAreUnseen(t *testing.T) {
	p := &containers.Plan{PodsAuthoritative: true, PodLogsUnseen: true}
	v := newPlanView(&agent.PlanReport{Node: "n", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80))
	if !v.PodLogsUnseen {
		t.Error("podLogsUnseen is not set")
	}
	var out bytes.Buffer
	v.print(&out)
	if want := "POD LOGS: nodegc does not see a running container's log under podLogsDirectory"; !strings.Contains(out.String(), want) {
		t.Errorf("plan output lacks %q:\n%s", want, out.String())
	}
	p.PodLogsUnseen = false
	out.Reset()
	newPlanView(&agent.PlanReport{Node: "n", Runtime: "containerd 2", Containers: p}, ptr.To[int32](85), ptr.To[int32](80)).print(&out)
	if strings.Contains(out.String(), "POD LOGS") {
		t.Errorf("plan output speaks of the pod logs while they are seen:\n%s", out.String())
	}
}

// TestPlanSaysWhichConfiguration: a plan says which configuration it
// planned with, in its head and in the JSON: the file and its digest (as
// the agent's nodegc_config_info{sha256}), or the built-in defaults when no
// -c was given, then naming the deployed file when it is there. Before, a
// plan without -c (kubectl exec ... -- /nodegc plan) planned with the
// defaults, no exclusions and 85/80, and said nothing of it.
func TestPlanSaysWhichConfiguration(t *testing.T) {
	cfg := config.Defaulted()
	digest, err := config.Digest(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		file     string
		deployed bool
		want     configView
		line     string
	}{
		"a file": {file: "/etc/nodegc/config.yaml", want: configView{File: "/etc/nodegc/config.yaml", SHA256: digest},
			line: "Configuration: /etc/nodegc/config.yaml (sha256 " + digest + ", as nodegc_config_info of an agent that runs it)"},
		"no -c": {want: configView{BuiltInDefaults: true, SHA256: digest},
			line: "Configuration: built-in defaults (no -c; sha256 " + digest + "): the agents of the chart and of deploy/ read /etc/nodegc/config.yaml"},
		"no -c, the deployed file here": {deployed: true, want: configView{BuiltInDefaults: true, SHA256: digest, DeployedHere: true},
			line: "Configuration: built-in defaults (no -c; sha256 " + digest + "): /etc/nodegc/config.yaml is here, the agent's: give -c /etc/nodegc/config.yaml to plan with it"},
	} {
		t.Run(name, func(t *testing.T) {
			v := newPlanView(&agent.PlanReport{Node: "n", Runtime: "containerd 2"}, ptr.To[int32](85), ptr.To[int32](80))
			v.setConfiguration(tc.file, cfg, tc.deployed)
			if diff := cmp.Diff(tc.want, v.Configuration); diff != "" {
				t.Errorf("configuration (-want +got):\n%s", diff)
			}
			var out bytes.Buffer
			v.print(&out)
			if lines := strings.Split(out.String(), "\n"); len(lines) < 2 || lines[1] != tc.line {
				t.Errorf("the plan's second line is not %q:\n%s", tc.line, out.String())
			}
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Configuration map[string]any `json:"configuration"`
			}
			if err := json.Unmarshal(data, &got); err != nil || got.Configuration["sha256"] != digest {
				t.Errorf("JSON configuration %v (%v), want its sha256 %s", got.Configuration, err, digest)
			}
		})
	}
}
