package app

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/images"
)

func newPlanCommand(s streams) *cobra.Command {
	o := &runOptions{}
	var output string
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what the image and container GC would remove on this node now, and what they keep and why; writes nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("--output must be empty or json, not %q", output)
			}
			cfg, err := o.load(s)
			if err != nil {
				return err
			}
			node, err := resolveNodeName(cfg.NodeName)
			if err != nil {
				return err
			}
			if w := nodeNameWarning(cfg.NodeName); w != "" {
				klog.Warning(w)
			}
			r, err := agent.Plan(cmd.Context(), agent.Options{Config: cfg, Kubeconfig: o.kubeconfig, NodeName: node, BootID: readBootID()})
			if err != nil {
				return err
			}
			view := newPlanView(r, cfg.ImageGC.HighThresholdPercent, cfg.ImageGC.LowThresholdPercent)
			view.setDryRun(cfg.ImageGC.DryRun, cfg.ContainerGC.DryRun)
			_, statErr := os.Stat(deployedConfig)
			view.setConfiguration(o.configFile, cfg, statErr == nil)
			if output == "json" {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(view); err != nil {
					return err
				}
			} else {
				view.print(s.out)
			}
			// What was made is printed; the exit code says whether it
			// is the whole plan.
			if code, why := planExitCode(cmd.Context(), r); code != 0 {
				fmt.Fprintf(s.err, "nodegc: %s\n", why)
				return &exitError{code: code}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.configFile, "config", "c", "", "configuration file, as for run")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for the pod view, as for run")
	o.addBindFlags(fs, "; as for run, to read the configuration the agent runs with")
	fs.StringVarP(&output, "output", "o", "", "output format: empty for tables, or json")
	return cmd
}

// planExitCode returns the exit code of `nodegc plan` for r, made under
// ctx, and why it is not 0: 1 when the plan was interrupted (ctx ended:
// SIGINT, SIGTERM) or neither the image plan nor the container plan was
// made, 2 when one of them is missing. The README's Commands section
// documents them.
func planExitCode(ctx context.Context, r *agent.PlanReport) (int, string) {
	switch {
	case ctx.Err() != nil:
		return 1, "interrupted: the plan may be incomplete; run plan again"
	case r.Images == nil && r.Containers == nil:
		return 1, "no image plan and no container plan (see why above); nothing was planned"
	case r.Images == nil:
		return 2, "no image plan (see why above); the container plan was made"
	case r.Containers == nil:
		return 2, "no container plan (see why above); the image plan was made"
	}
	return 0, ""
}

// planView is the printable form of a plan, also its JSON.
type planView struct {
	Node    string `json:"node"`
	Runtime string `json:"runtime"`
	// Configuration: which one the plan was made with.
	Configuration configView `json:"configuration"`
	// NodeGC says whether a nodegc runs node GC on this state directory
	// now (`nodegc run` would wait for it on standby), and who.
	NodeGC nodeGCView `json:"nodeGC"`
	// DryRun names the collectors whose dryRun is on: `run` logs their
	// removals and makes none.
	DryRun      []string   `json:"dryRun,omitempty"`
	Disk        *diskView  `json:"imageFilesystem,omitempty"`
	Images      []imageRow `json:"images"`
	ImagesErr   string     `json:"imagesError,omitempty"`
	PodsView    string     `json:"podsView"`
	PodsMissing []string   `json:"podsMissingFromAPI,omitempty"`
	// NodeLease: why the pods of the view that run here did not show it
	// is this node's, or why nothing goes because its pod is gone
	// (node_lease_stale): the Node's lease is not fresh
	// (containers.Plan.PodsLease).
	NodeLease string `json:"nodeLease,omitempty"`
	// PodsNotInRuntime: pods the API server says run on this node, of
	// none of which the runtime lists a sandbox
	// (containers.Plan.PodsNotInRuntime).
	PodsNotInRuntime []string `json:"podsNotInRuntime,omitempty"`
	// NodeRuntime: the container runtime the Node's kubelet reports when
	// it is not the one nodegc asks (containers.Plan.NodeRuntime).
	NodeRuntime string `json:"nodeRuntime,omitempty"`
	// PodLogsUnseen: nodegc does not see a running container's log under
	// podLogsDirectory (containers.Plan.PodLogsUnseen).
	PodLogsUnseen bool           `json:"podLogsUnseen,omitempty"`
	Containers    []containerRow `json:"containers"`
	Sandboxes     []containerRow `json:"sandboxes"`
	LogDirs       []containerRow `json:"logDirectories"`
	LogLinks      []containerRow `json:"logLinks"`
	// ContainerBytes totals what the container GC's planned removals free.
	ContainerBytes *containerBytesView `json:"containerBytes,omitempty"`
	ContainerErr   string              `json:"containersError,omitempty"`
}

// configView says which configuration a plan was made with.
type configView struct {
	// File is the -c file ("<stdin>" for -), "" for none.
	File string `json:"file,omitempty"`
	// BuiltInDefaults: no -c was given; the defaults (and flags) were.
	BuiltInDefaults bool `json:"builtInDefaults,omitempty"`
	// SHA256 is config.Digest of the configuration, defaults and flags
	// applied: an agent that runs the same one exports it as
	// nodegc_config_info{sha256}.
	SHA256 string `json:"sha256"`
	// DeployedHere: with no -c, deployedConfig exists here (the agent's
	// pod), and was not read.
	DeployedHere bool `json:"deployedConfigHere,omitempty"`
}

type nodeGCView struct {
	Running bool   `json:"running"`
	Holder  string `json:"holder,omitempty"`
	Error   string `json:"error,omitempty"`
}

type containerBytesView struct {
	WritableLayerBytes   uint64 `json:"writableLayerBytes"`
	ContainerLogBytes    uint64 `json:"containerLogBytes"`
	PodLogDirectoryBytes uint64 `json:"podLogDirectoryBytes"`
	TotalBytes           uint64 `json:"totalBytes"`
	// WritableLayersUnknown says why writable layers count 0.
	WritableLayersUnknown string `json:"writableLayersUnknown,omitempty"`
}

type diskView struct {
	CapacityBytes        uint64 `json:"capacityBytes"`
	AvailableBytes       uint64 `json:"availableBytes"`
	UsagePercent         int    `json:"usagePercent"`
	HighThresholdPercent int32  `json:"highThresholdPercent"`
	LowThresholdPercent  int32  `json:"lowThresholdPercent"`
	BytesToFree          uint64 `json:"bytesToFree"`
	EstimatedFreedBytes  uint64 `json:"estimatedFreedBytes"`
	ExpectedUsagePercent int    `json:"expectedUsagePercent"`
	Accounting           string `json:"accounting"`
	// ScheduledPods says how the scheduled rule saw the node's pods: off
	// (no API access), authoritative, or not (it then keeps more).
	ScheduledPods string `json:"scheduledPods"`
	// IfCollecting is, when usage is between the thresholds, what the
	// agent removes if a collection is under way (usage reached high and
	// has not been under low since): the plan cannot know.
	IfCollecting *collectingView `json:"ifCollecting,omitempty"`
}

type collectingView struct {
	BytesToFree         uint64   `json:"bytesToFree"`
	EstimatedFreedBytes uint64   `json:"estimatedFreedBytes"`
	Remove              []string `json:"remove"`
}

type imageRow struct {
	Action        string     `json:"action"`
	Reason        string     `json:"reason"`
	Bytes         uint64     `json:"bytes"`
	ID            string     `json:"id"`
	Tags          []string   `json:"tags,omitempty"`
	FirstDetected time.Time  `json:"firstDetected"`
	LastUsed      *time.Time `json:"lastUsed,omitempty"`
	// Arrived is when the runtime says the image arrived (containerd).
	Arrived *time.Time `json:"arrived,omitempty"`
	// ScheduledBy names the pod that may still run a scheduled image, or
	// why the image is kept as such.
	ScheduledBy string `json:"scheduledBy,omitempty"`
}

type containerRow struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Bytes is what a removal frees: for a container its writable layer
	// and its logs, for a sandbox its writable layer, for a pod log
	// directory what its containers' logs leave; nil for what is kept and
	// for log links.
	Bytes              *uint64 `json:"bytes,omitempty"`
	WritableLayerBytes *uint64 `json:"writableLayerBytes,omitempty"`
	LogBytes           *uint64 `json:"logBytes,omitempty"`
	Name               string  `json:"name"`
	ID                 string  `json:"id,omitempty"`
}

func newPlanView(r *agent.PlanReport, high, low *int32) *planView {
	v := &planView{Node: r.Node, Runtime: r.Runtime, NodeGC: nodeGCView{Running: r.NodeGCRunning, Holder: r.NodeGCHolder}}
	if r.NodeGCErr != nil {
		v.NodeGC.Error = r.NodeGCErr.Error()
	}
	if r.ImagesErr != nil {
		v.ImagesErr = r.ImagesErr.Error()
	}
	if p := r.Images; p != nil {
		acct := "CRI sizes (shared layers counted per image)"
		switch {
		case p.ExactAccounting && p.BlobsElsewhere != "":
			acct = "containerd snapshots (shared layers counted once; content blobs not: " + p.BlobsElsewhere + ")"
		case p.ExactAccounting:
			acct = "containerd layers (shared layers counted once)"
		}
		after := images.DiskStats{Capacity: p.Disk.Capacity, Available: p.Disk.Available + p.EstimatedFreed}
		v.Disk = &diskView{
			CapacityBytes: p.Disk.Capacity, AvailableBytes: p.Disk.Available, UsagePercent: p.UsagePercent,
			HighThresholdPercent: *high, LowThresholdPercent: *low, BytesToFree: p.BytesToFree,
			EstimatedFreedBytes: p.EstimatedFreed, ExpectedUsagePercent: after.UsagePercent(), Accounting: acct,
			ScheduledPods: scheduledPods(p.PodsView),
		}
		if tl := r.ImagesToLow; tl != nil {
			c := &collectingView{BytesToFree: tl.BytesToFree, EstimatedFreedBytes: tl.EstimatedFreed, Remove: []string{}}
			for _, d := range tl.Remove {
				c.Remove = append(c.Remove, imageName(d.Image.ID, d.Image.RepoTags))
			}
			v.Disk.IfCollecting = c
		}
		add := func(action string, ds []images.Decision) {
			for _, d := range ds {
				row := imageRow{Action: action, Reason: d.Reason, Bytes: d.Bytes, ID: d.Image.ID, Tags: d.Image.RepoTags, FirstDetected: d.Image.FirstDetected}
				if d.Reason == images.KeepScheduled {
					row.ScheduledBy = d.Image.ScheduledBy
				}
				if !d.Image.Arrived.IsZero() {
					at := d.Image.Arrived
					row.Arrived = &at
				}
				if !d.Image.LastUsed.IsZero() {
					lu := d.Image.LastUsed
					row.LastUsed = &lu
				}
				v.Images = append(v.Images, row)
			}
		}
		add("remove", p.Remove)
		add("keep", p.Spare)
		add("keep", p.Keep)
	}
	if r.ContainersErr != nil {
		v.ContainerErr = r.ContainersErr.Error()
	}
	if p := r.Containers; p != nil {
		v.PodsView = "authoritative"
		if !p.PodsAuthoritative {
			v.PodsView = "not authoritative (" + p.PodsReason + "): nothing is removed because its pod is gone"
		}
		if p.PodsNode != "" {
			v.PodsView += fmt.Sprintf(" [node %q]", p.PodsNode)
		}
		for _, ref := range p.PodsMissing {
			v.PodsMissing = append(v.PodsMissing, ref.String())
		}
		v.NodeLease = p.PodsLease
		for _, ref := range p.PodsNotInRuntime {
			v.PodsNotInRuntime = append(v.PodsNotInRuntime, ref.String())
		}
		v.NodeRuntime = p.NodeRuntime
		v.PodLogsUnseen = p.PodLogsUnseen
		removal := func(action string, n uint64) *uint64 {
			if action != "remove" {
				return nil
			}
			return &n
		}
		v.Containers = rows(p.RemoveContainers, p.KeepContainers, func(action string, d containers.ContainerDecision) containerRow {
			c := d.Container
			return containerRow{Action: action, Reason: d.Reason, ID: short(c.ID),
				Bytes: removal(action, d.WritableLayerBytes+d.LogBytes), WritableLayerBytes: removal(action, d.WritableLayerBytes),
				LogBytes: removal(action, d.LogBytes),
				Name:     fmt.Sprintf("%s/%s %s #%d (%s)", c.PodNamespace, c.PodName, c.Name, c.Attempt, c.State)}
		})
		v.Sandboxes = rows(p.RemoveSandboxes, p.KeepSandboxes, func(action string, d containers.SandboxDecision) containerRow {
			sb := d.Sandbox
			return containerRow{Action: action, Reason: d.Reason, ID: short(sb.ID),
				Bytes: removal(action, d.WritableLayerBytes), WritableLayerBytes: removal(action, d.WritableLayerBytes),
				Name: fmt.Sprintf("%s/%s #%d", sb.PodNamespace, sb.PodName, sb.Attempt)}
		})
		v.LogDirs = rows(p.RemoveLogDirs, p.KeepLogDirs, func(action string, d containers.LogDirDecision) containerRow {
			return containerRow{Action: action, Reason: d.Reason, Name: d.Dir.Name, Bytes: removal(action, d.Bytes)}
		})
		b := p.Bytes()
		v.ContainerBytes = &containerBytesView{WritableLayerBytes: b.WritableLayer, ContainerLogBytes: b.ContainerLogs,
			PodLogDirectoryBytes: b.PodLogDirectory, TotalBytes: b.Total(), WritableLayersUnknown: p.WritableLayersUnknown}
		v.LogLinks = rows(p.RemoveLogLinks, p.KeepLogLinks, func(action string, d containers.LogLinkDecision) containerRow {
			return containerRow{Action: action, Reason: d.Reason, Name: d.Link.Name}
		})
	}
	return v
}

// rows makes one row per decision, those to remove first (nil for none, so
// that the JSON says null as before).
func rows[D any](remove, keep []D, row func(action string, d D) containerRow) []containerRow {
	var out []containerRow
	for _, d := range remove {
		out = append(out, row("remove", d))
	}
	for _, d := range keep {
		out = append(out, row("keep", d))
	}
	return out
}

// setDryRun notes which collectors have dryRun on.
func (v *planView) setDryRun(images, containers bool) {
	v.DryRun = nil
	if images {
		v.DryRun = append(v.DryRun, "imageGC.dryRun")
	}
	if containers {
		v.DryRun = append(v.DryRun, "containerGC.dryRun")
	}
}

// setConfiguration records which configuration the plan was made with:
// cfg, read from file ("" for none: the built-in defaults); deployedHere
// says deployedConfig exists on this machine.
func (v *planView) setConfiguration(file string, cfg *config.NodeGCConfiguration, deployedHere bool) {
	v.Configuration = configView{File: file}
	if file == "" {
		v.Configuration = configView{BuiltInDefaults: true, DeployedHere: deployedHere}
	}
	if file == "-" {
		v.Configuration.File = displayName(file)
	}
	// A configuration that validated marshals; else the digest stays "".
	v.Configuration.SHA256, _ = config.Digest(cfg)
}

func (v *planView) print(out io.Writer) {
	fmt.Fprintf(out, "Node %s, runtime %s\n", v.Node, v.Runtime)
	switch c := v.Configuration; {
	case c.File != "":
		fmt.Fprintf(out, "Configuration: %s (sha256 %s, as nodegc_config_info of an agent that runs it)\n", c.File, c.SHA256)
	case c.DeployedHere:
		fmt.Fprintf(out, "Configuration: built-in defaults (no -c; sha256 %s): %s is here, the agent's: give -c %s to plan with it\n",
			c.SHA256, deployedConfig, deployedConfig)
	case c.BuiltInDefaults:
		fmt.Fprintf(out, "Configuration: built-in defaults (no -c; sha256 %s): the agents of the chart and of deploy/ read %s\n",
			c.SHA256, deployedConfig)
	}
	switch g := v.NodeGC; {
	case g.Error != "":
		fmt.Fprintf(out, "Node GC here: unknown (%s)\n", g.Error)
	case g.Running:
		fmt.Fprintf(out, "Node GC here: run by %s (it holds the state directory's lock; another `nodegc run` would wait for it)\n", cmp.Or(g.Holder, "an unknown nodegc ("+agent.NodeLockFileName+" names none: its holder could not write it, as in a full or read-only state directory)"))
	default:
		fmt.Fprintln(out, "Node GC here: no nodegc runs it now (none holds the state directory's lock)")
	}
	if len(v.DryRun) > 0 {
		fmt.Fprintf(out, "%s on: `nodegc run` logs these removals and makes none\n", strings.Join(v.DryRun, " and "))
	}
	fmt.Fprintln(out)
	if v.ImagesErr != "" {
		fmt.Fprintf(out, "IMAGES: no plan: %s\n\n", v.ImagesErr)
	}
	if d := v.Disk; d != nil {
		fmt.Fprintf(out, "IMAGE FILESYSTEM: %s of %s available, usage %d%% (high %d%%, low %d%%)\n",
			bytesString(d.AvailableBytes), bytesString(d.CapacityBytes), d.UsagePercent, d.HighThresholdPercent, d.LowThresholdPercent)
		fmt.Fprintf(out, "  to free now: %s; planned removals free %s; usage after: %d%%; accounting: %s\n",
			bytesString(d.BytesToFree), bytesString(d.EstimatedFreedBytes), d.ExpectedUsagePercent, d.Accounting)
		if c := d.IfCollecting; c != nil {
			fmt.Fprintf(out, "  if a collection is under way (usage reached %d%% and has not been under %d%% since; only the running agent knows), it goes on to low: to free %s; removals free %s: %s\n",
				d.HighThresholdPercent, d.LowThresholdPercent, bytesString(c.BytesToFree), bytesString(c.EstimatedFreedBytes), cmp.Or(strings.Join(c.Remove, ", "), "none"))
		}
		fmt.Fprintln(out, "  the agent also collects ahead of a fill fast enough to reach the kubelet's eviction threshold within fillRateHorizon (trigger projected), which a plan cannot see")
		fmt.Fprintf(out, "  images of pods about to run (scheduled): %s\n\n", d.ScheduledPods)
		table(out, "IMAGES", []string{"ACTION", "REASON", "BYTES", "LAST USED", "FIRST SEEN", "IMAGE"}, len(v.Images), func(i int) []string {
			r := v.Images[i]
			lastUsed := "never"
			if r.LastUsed != nil {
				lastUsed = ago(*r.LastUsed)
			}
			name := imageName(r.ID, r.Tags)
			reason := r.Reason
			if r.ScheduledBy != "" {
				reason += " (" + r.ScheduledBy + ")"
			}
			return []string{r.Action, reason, bytesString(r.Bytes), lastUsed, ago(r.FirstDetected), name}
		})
	}
	if v.ContainerErr != "" {
		fmt.Fprintf(out, "CONTAINERS: no plan: %s\n\n", v.ContainerErr)
		return
	}
	fmt.Fprintf(out, "POD VIEW: %s\n", v.PodsView)
	switch {
	case len(v.PodsMissing) > 0 && strings.HasPrefix(v.PodsView, "authoritative"):
		fmt.Fprintf(out, "  the runtime runs pods the API server no longer has (deleted while they run: force-deleted?), kept as running: %s\n",
			strings.Join(v.PodsMissing, ", "))
	case len(v.PodsMissing) > 0:
		fmt.Fprintf(out, "  the runtime runs pods the API server does not list for this node: %s\n", strings.Join(v.PodsMissing, ", "))
	}
	switch {
	case v.NodeLease != "" && strings.Contains(v.PodsView, "("+containers.ViewNodeLeaseStale+")"):
		fmt.Fprintf(out, "  the Node's lease is not renewed (its kubelet down, or running under another node name), or nodegc may not read it (RBAC: get on leases in kube-node-lease): %s\n", v.NodeLease)
	case v.NodeLease != "":
		fmt.Fprintf(out, "  pods the view lists run here, but do not show it is this node's: %s\n", v.NodeLease)
	}
	if len(v.PodsNotInRuntime) > 0 {
		fmt.Fprintf(out, "  the runtime (%s) lists no sandbox of the pods the API server says run on this node: %s;\n"+
			"  is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket)? Dangling log links are kept too\n",
			v.Runtime, strings.Join(v.PodsNotInRuntime, ", "))
	}
	if v.NodeRuntime != "" {
		fmt.Fprintf(out, "  the Node's kubelet reports another container runtime (%s) than the one nodegc asks (%s);\n"+
			"  is containerRuntimeEndpoint the kubelet's runtime (k3s, RKE2: their own containerd's socket)? Dangling log links are kept too\n",
			v.NodeRuntime, v.Runtime)
	}
	if v.PodLogsUnseen {
		fmt.Fprintf(out, "POD LOGS: nodegc does not see a running container's log under podLogsDirectory (its view of it is not the kubelet's: "+
			"a filesystem mounted there after its container started?): no log link, pod log directory or log file is removed, "+
			"nor a live pod's container a limit or maxAge would remove (%s)\n", containers.KeepLogsUnseen)
	}
	if b := v.ContainerBytes; b != nil {
		fmt.Fprintf(out, "CONTAINER GC: planned removals free %s (writable layers %s, container logs %s, pod log directories %s)\n",
			bytesString(b.TotalBytes), bytesString(b.WritableLayerBytes), bytesString(b.ContainerLogBytes), bytesString(b.PodLogDirectoryBytes))
		if b.WritableLayersUnknown != "" {
			fmt.Fprintf(out, "  writable-layer bytes unknown: %s\n", b.WritableLayersUnknown)
		}
	}
	fmt.Fprintln(out)
	for _, t := range []struct {
		title string
		rows  []containerRow
	}{{"CONTAINERS", v.Containers}, {"SANDBOXES", v.Sandboxes}, {"POD LOG DIRECTORIES", v.LogDirs}, {"CONTAINER LOG LINKS", v.LogLinks}} {
		rows := t.rows
		table(out, t.title, []string{"ACTION", "REASON", "BYTES", "ID", "NAME"}, len(rows), func(i int) []string {
			bytes := "-"
			if b := rows[i].Bytes; b != nil {
				bytes = bytesString(*b)
			}
			return []string{rows[i].Action, rows[i].Reason, bytes, rows[i].ID, rows[i].Name}
		})
	}
}

func table(out io.Writer, title string, header []string, n int, row func(int) []string) {
	fmt.Fprintf(out, "%s (%d)\n", title, n)
	if n == 0 {
		fmt.Fprintln(out)
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(header, "\t"))
	for i := range n {
		fmt.Fprintln(tw, "  "+strings.Join(row(i), "\t"))
	}
	tw.Flush()
	fmt.Fprintln(out)
}

// imageName names an image in the plan: its tags and short ID, or its
// short ID alone.
func imageName(id string, tags []string) string {
	if len(tags) == 0 {
		return short(id)
	}
	return strings.Join(tags, ",") + " (" + short(id) + ")"
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}

func bytesString(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	default:
		return fmt.Sprintf("%d B", b)
	}
}

// scheduledPods says in words how the image GC's scheduled rule saw the
// node's pods (images.Plan.PodsView).
func scheduledPods(view string) string {
	switch view {
	case "":
		return "off (no API access)"
	case images.PodsAuthoritative:
		return "kept, from the pods bound to this node"
	}
	return "pod view not authoritative (" + view + "): the last known pods' images and every image that arrived since are kept"
}
