package app

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/memlimit"
	"github.com/nodegc/nodegc/pkg/config"
)

type runOptions struct {
	configFile         string
	kubeconfig         string
	ownerGC            string
	metricsBindAddress string
	healthzBindAddress string

	// metricsBindAddressLine and healthzBindAddressLine are the lines of
	// configFile that set metricsBindAddress and healthzBindAddress (0:
	// the file does not set it), once loaded: explain says where the
	// address it asked came from, run where one it cannot listen on did
	// (bindSource).
	metricsBindAddressLine int
	healthzBindAddressLine int
}

// bindSource says what set the bind address field (metricsBindAddress,
// healthzBindAddress), once loaded: its flag, a line of the file, or the
// default (agent.Options.BindSource).
func (o *runOptions) bindSource(field string) string {
	var flag string
	var line int
	switch field {
	case "metricsBindAddress":
		flag, line = "--metrics-bind-address", o.metricsBindAddressLine
		if o.metricsBindAddress != "" {
			return "from " + flag
		}
	case "healthzBindAddress":
		flag, line = "--healthz-bind-address", o.healthzBindAddressLine
		if o.healthzBindAddress != "" {
			return "from " + flag
		}
	default:
		return ""
	}
	if line > 0 {
		return fmt.Sprintf("line %d of %s", line, displayName(o.configFile))
	}
	return "the default; " + flag + " or the configuration file sets another"
}

func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.configFile, "config", "c", "", "path of the configuration file (NodeGCConfiguration, optionally with a KubeletConfiguration); empty means all defaults")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file for API access; empty means clientConnection.kubeconfig, else the in-cluster config, and without either the agent runs node-only")
	fs.StringVar(&o.ownerGC, "owner-gc", string(agent.OwnerGCAuto), "owner GC mode: auto (join the leader election), only (owner GC only, no node GC), off (node GC only)")
	o.addBindFlags(fs, "")
}

// addBindFlags adds the flags that override the bind addresses of the
// configuration file; plan and explain take them too (as, why), so that
// they read the configuration an agent runs with.
func (o *runOptions) addBindFlags(fs *pflag.FlagSet, why string) {
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", "", "overrides metricsBindAddress (host:port, or 0 to disable)"+why)
	fs.StringVar(&o.healthzBindAddress, "healthz-bind-address", "", "overrides healthzBindAddress (host:port, or 0 to disable)"+why)
}

func newRunCommand(s streams) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent: node GC on this node, owner GC when elected",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd, s)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *runOptions) run(cmd *cobra.Command, s streams) error {
	adjustMemoryLimit()
	mode, err := parseOwnerGCMode(o.ownerGC)
	if err != nil {
		return err
	}
	cfg, err := o.load(s)
	if err != nil {
		return err
	}
	if w := soloOwnerGCWarning(mode, cfg); w != "" {
		klog.Warning(w)
	}
	nodeName, err := resolveNodeName(cfg.NodeName)
	if err != nil && mode != agent.OwnerGCOnly {
		return err
	}
	if w := nodeNameWarning(cfg.NodeName); w != "" {
		klog.Warning(w)
	}
	var bootID string
	if mode != agent.OwnerGCOnly {
		bootID = readBootID()
	}
	return agent.Run(cmd.Context(), agent.Options{Config: cfg, Kubeconfig: o.kubeconfig, OwnerGC: mode, NodeName: nodeName, BootID: bootID,
		BindSource: o.bindSource})
}

// adjustMemoryLimit lowers a GOMEMLIMIT at the container's memory limit (as
// the chart sets it: a resourceFieldRef gives the whole limit) to 90% of it,
// so that Go collects harder before the cgroup is full (internal/memlimit).
func adjustMemoryLimit() {
	r, err := memlimit.Adjust()
	switch {
	case err != nil:
		klog.Warningf("Cannot read the container's memory limit (%v): Go's soft memory limit stays GOMEMLIMIT's", err)
	case r.Changed:
		klog.InfoS("Go's soft memory limit (GOMEMLIMIT) lowered to 90% of the container's memory limit, for the memory Go does not count",
			"softLimit", r.After, "memoryLimit", r.CgroupLimit, "gomemlimit", r.Before, "cgroupFile", r.CgroupFile)
	}
}

// bootIDFile holds this machine's boot ID, which the kubelet reports as its
// Node's status.nodeInfo.bootID. /proc/sys is not namespaced for it: a
// container reads the host's.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// readBootID returns this machine's boot ID; "" with a warning when it
// cannot be read (the pod view's node name is then checked against what
// the runtime runs only).
func readBootID() string {
	b, err := os.ReadFile(bootIDFile)
	id := strings.TrimSpace(string(b))
	if err == nil && id == "" {
		err = errors.New("empty")
	}
	if err != nil {
		klog.Warningf("Cannot read this machine's boot ID from %s: %v; the node name is checked against what the runtime runs only, "+
			"so a wrong nodeName on a node that runs no pod goes unnoticed", bootIDFile, err)
		return ""
	}
	return id
}

// load reads and defaults the configuration, applies the flags that
// override it, then validates the result once: a flag may fix what the file
// alone gets wrong (a bind address that clashes with the other's default),
// and a problem with a flag's value is blamed on the flag. The flags apply
// to the validation of a file that does not decode whole too.
func (o *runOptions) load(s streams) (*config.NodeGCConfiguration, error) {
	loaded := &config.Loaded{Config: config.Defaulted()}
	if o.configFile != "" {
		var err error
		if loaded, err = decodeConfig(o.configFile, s, config.WithOverride(o.applyFlags)); err != nil {
			return nil, err
		}
		if len(loaded.FromKubelet) > 0 {
			klog.InfoS("Using fields of the KubeletConfiguration document", "fields", loaded.FromKubelet)
		}
		o.metricsBindAddressLine = loaded.Line("metricsBindAddress")
		o.healthzBindAddressLine = loaded.Line("healthzBindAddress")
	} else {
		o.applyFlags(loaded)
	}
	if err := validateConfig(o.configFile, loaded, agent.OwnerGCMode(o.ownerGC), s); err != nil {
		return nil, err
	}
	return loaded.Config, nil
}

// applyFlags gives the fields of loaded that a flag sets the flag's value.
func (o *runOptions) applyFlags(loaded *config.Loaded) {
	if o.metricsBindAddress != "" {
		loaded.Config.MetricsBindAddress = o.metricsBindAddress
		loaded.SetByFlag("metricsBindAddress", "--metrics-bind-address")
	}
	if o.healthzBindAddress != "" {
		loaded.Config.HealthzBindAddress = o.healthzBindAddress
		loaded.SetByFlag("healthzBindAddress", "--healthz-bind-address")
	}
}

// nodeNameWarning says when nodeName in the config and $NODE_NAME (the
// downward API's spec.nodeName in the DaemonSet) name different nodes:
// nodeName wins, and a nodeName in a ConfigMap that every node's agent
// reads is wrong on every node but one.
func nodeNameWarning(fromConfig string) string {
	env := os.Getenv("NODE_NAME")
	if fromConfig == "" || env == "" || env == fromConfig {
		return ""
	}
	return fmt.Sprintf("nodeName %q in the config is not NODE_NAME %q, the node this pod runs on; the config wins: "+
		"remove nodeName from a config that several nodes read", fromConfig, env)
}

// parseOwnerGCMode returns the --owner-gc mode s names.
func parseOwnerGCMode(s string) (agent.OwnerGCMode, error) {
	switch mode := agent.OwnerGCMode(s); mode {
	case agent.OwnerGCAuto, agent.OwnerGCOnly, agent.OwnerGCOff:
		return mode, nil
	}
	return "", fmt.Errorf("--owner-gc must be one of auto, only, off; got %q", s)
}

// modeProblems returns what `run --owner-gc=mode` refuses in the
// configuration loaded, as config.Loaded.Problems writes problems ("line N:
// " when the file sets the field); none for mode "" (plan, explain: no
// owner GC). run and `config validate` both check them, so that a file
// validate accepts does not stop run with the same --owner-gc.
func modeProblems(mode agent.OwnerGCMode, loaded *config.Loaded) []string {
	cfg := loaded.Config
	var out []string
	at := func(path, msg string) {
		if line := loaded.Line(path); line > 0 {
			msg = fmt.Sprintf("line %d: %s", line, msg)
		}
		out = append(out, msg)
	}
	if mode == agent.OwnerGCAuto && *cfg.OwnerGC.EnableGarbageCollector && !*cfg.LeaderElection.LeaderElect {
		at("leaderElection.leaderElect", "leaderElection.leaderElect: false with --owner-gc=auto would run the owner GC in every agent "+
			"that runs with it (every node of a DaemonSet), each deleting on its own: set leaderElect: true, or run the owner GC in one "+
			"instance with --owner-gc=only (and the node agents with --owner-gc=off)")
	}
	if mode == agent.OwnerGCOnly && !*cfg.OwnerGC.EnableGarbageCollector {
		at("ownerGC.enableGarbageCollector", "ownerGC.enableGarbageCollector: false with --owner-gc=only would run nothing "+
			"(no node GC, no owner GC), while its monitoring takes it for an owner GC that never syncs: remove this instance "+
			"(the chart: ownerGC.mode off), or set enableGarbageCollector: true")
	}
	return out
}

// soloOwnerGCWarning warns when the owner GC runs without a Lease
// (--owner-gc=only, leaderElect: false): every replica of the owner
// collector's Deployment (the chart runs two) then collects on its own,
// each watching every resource and acting on what it saw. The writes'
// preconditions keep them from wrong deletions, but not from doubled
// watches and requests, nor from two holds and two sets of Events. One
// replica alone is a valid setup, so this is a warning, not an error.
func soloOwnerGCWarning(mode agent.OwnerGCMode, cfg *config.NodeGCConfiguration) string {
	if mode != agent.OwnerGCOnly || *cfg.LeaderElection.LeaderElect {
		return ""
	}
	return "--owner-gc=only with leaderElection.leaderElect: false: no Lease elects this instance, so every replica " +
		"started with this configuration collects on its own (the chart's owner Deployment runs two): run exactly one, " +
		"or set leaderElect: true"
}

// resolveNodeName returns the node this agent collects for: nodeName from
// the config, else $NODE_NAME (the downward API in the DaemonSet), else the
// host name, lower-cased as the kubelet registers it.
func resolveNodeName(fromConfig string) (string, error) {
	name := fromConfig
	if name == "" {
		name = os.Getenv("NODE_NAME")
	}
	if name == "" {
		host, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("no nodeName in the config, no NODE_NAME and no host name: %w", err)
		}
		name = strings.ToLower(host)
	}
	if msgs := config.NodeNameProblems(name); len(msgs) > 0 {
		return "", fmt.Errorf("node name %q: %s (set nodeName or NODE_NAME)", name, strings.Join(msgs, "; "))
	}
	return name, nil
}
