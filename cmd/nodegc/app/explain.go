package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodegc/nodegc/pkg/ownergc"
)

// explainTimeout bounds one explain request (the leader reads the object,
// unobserved owners and blocking dependents).
const explainTimeout = time.Minute

type explainOptions struct {
	// config is the configuration file and the flags that override it,
	// as for run.
	config    runOptions
	namespace string
	output    string
	server    string
}

func newExplainCommand(s streams) *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain KIND/NAME [-n NAMESPACE]",
		Short: "Say why the owner GC keeps an object, what it waits for, or why it deleted it (asks the running leader)",
		Long: `Ask the owner GC that runs in a nodegc agent why an object is still there, or why
it is gone: its owners and whether each still holds it, its dependents and
which of them block its deletion, its finalizers and who must remove them, the
owner GC's recent decisions about it (kept for an hour), and one verdict.

KIND is what kubectl takes: deployment, deployments.apps, Deployment, deploy, cm.
The agent asked is --server, else the one at metricsBindAddress of the
configuration (-c), on 127.0.0.1 when that binds every address. Only the
instance that holds the owner GC lease can answer; another one says which
instance does, and this command prints how to ask it.`,
		Example: `  nodegc explain deployment/web -n shop -c /etc/nodegc/config.yaml
  kubectl exec -n nodegc deploy/nodegc-owner -- /nodegc explain cm/settings -n shop -o json -c /etc/nodegc/config.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			_, _, err := explainTarget(args)
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), s, args)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.config.configFile, "config", "c", "", "configuration file, as for run (for metricsBindAddress and the lease's namespace)")
	o.config.addBindFlags(fs, "; as for run: the agent asked listens at metricsBindAddress")
	fs.StringVarP(&o.namespace, "namespace", "n", "default", "namespace of the object (ignored for cluster-scoped kinds)")
	fs.StringVarP(&o.output, "output", "o", "", "output format: empty for a report, or json")
	fs.StringVar(&o.server, "server", "", "URL of the agent's metrics server (default: from metricsBindAddress)")
	return cmd
}

// explainTarget splits KIND/NAME (or KIND NAME).
func explainTarget(args []string) (kind, name string, err error) {
	switch len(args) {
	case 1:
		kind, name, _ = strings.Cut(args[0], "/")
	case 2:
		if !strings.Contains(args[0], "/") {
			kind, name = args[0], args[1]
		}
	}
	if kind == "" || name == "" || strings.Contains(name, "/") {
		return "", "", errors.New("usage: nodegc explain KIND/NAME [-n NAMESPACE] (or KIND NAME)")
	}
	return kind, name, nil
}

func (o *explainOptions) run(ctx context.Context, s streams, args []string) error {
	kind, name, err := explainTarget(args)
	if err != nil {
		return err
	}
	if o.output != "" && o.output != "json" {
		return fmt.Errorf("--output must be empty or json, not %q", o.output)
	}
	cfg, err := o.config.load(s)
	if err != nil {
		return err
	}
	server := o.server
	if server == "" {
		if server, err = serverFor(cfg.MetricsBindAddress); err != nil {
			return err
		}
	}
	q := url.Values{"resource": {kind}, "namespace": {o.namespace}, "name": {name}}
	ctx, cancel := context.WithTimeout(ctx, explainTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+ownergc.ExplainPath+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if opErr := (*net.OpError)(nil); errors.As(err, &opErr) && opErr.Op == "dial" {
		fmt.Fprintf(s.err, "nodegc: no nodegc agent answers at %s (%s): %v\n", server, o.serverSource(cfg.MetricsBindAddress), opErr)
		o.printUnreachableHint(s.err, cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName, kind+"/"+name)
		return &exitError{code: 1}
	}
	if err != nil {
		return fmt.Errorf("ask the agent at %s: %w", server, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read the answer of %s: %w", server, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e ownergc.ExplainError
		if json.Unmarshal(body, &e) != nil || e.Message == "" {
			return fmt.Errorf("%s answered %s: %s", server, resp.Status, strings.TrimSpace(string(body)))
		}
		fmt.Fprintln(s.err, e.Message)
		if !e.Leader && resp.StatusCode == http.StatusServiceUnavailable {
			o.printLeaderHint(s.err, e.LeaderIdentity, cfg.LeaderElection.ResourceNamespace, cfg.LeaderElection.ResourceName, kind+"/"+name)
		}
		return &exitError{code: 1}
	}
	if o.output == "json" {
		_, err := s.out.Write(body)
		return err
	}
	var e ownergc.Explanation
	if err := json.Unmarshal(body, &e); err != nil {
		return fmt.Errorf("decode the answer of %s: %w", server, err)
	}
	printExplanation(s.out, &e)
	return nil
}

// serverFor is the URL of the metrics server bound at addr, on loopback
// when addr binds every address.
func serverFor(addr string) (string, error) {
	if addr == "0" {
		return "", errors.New("metricsBindAddress is 0 (no metrics server): give --server")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metricsBindAddress %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// serverSource says where the address explain asked came from: --server,
// else metricsBindAddress (addr), of -c's file or its flag, or the default.
func (o *explainOptions) serverSource(addr string) string {
	switch {
	case o.server != "":
		return "given by --server"
	case o.config.metricsBindAddress != "":
		return fmt.Sprintf("metricsBindAddress %s, from --metrics-bind-address", addr)
	case o.config.configFile != "" && o.config.metricsBindAddressLine > 0:
		return fmt.Sprintf("metricsBindAddress %s, line %d of -c %s", addr, o.config.metricsBindAddressLine, o.config.configFile)
	case o.config.configFile != "":
		return fmt.Sprintf("metricsBindAddress %s, the default: -c %s does not set it", addr, o.config.configFile)
	}
	return fmt.Sprintf("metricsBindAddress %s, the default: no -c given", addr)
}

// deployedConfig is where the manifests of deploy/ and the chart mount the
// agents' configuration.
const deployedConfig = "/etc/nodegc/config.yaml"

// printUnreachableHint says what explain needs when no agent answers: the
// running agent that leads the owner GC, asked from its own pod with its
// configuration (whose metricsBindAddress says where it listens). The
// leader's pod is named by the Lease it holds (its identity is the pod's
// name, "_" and a suffix), whatever the release's name and the owner GC's
// mode; the chart puts the Lease in the release's namespace.
func (o *explainOptions) printUnreachableHint(w io.Writer, leaseNamespace, leaseName, target string) {
	args := target + " -n " + o.namespace
	if o.output != "" {
		args += " -o " + o.output
	}
	fmt.Fprintf(w, "nodegc explain asks the running agent that leads the owner GC, at its metricsBindAddress: run it in the leader's pod "+
		"with the agent's configuration (-c), or give --server. The leader's pod holds the Lease %s/%s (POD is empty while no instance leads: "+
		"wait for one to take the Lease); with the manifests of deploy/ or the chart:\n"+
		"  POD=$(kubectl get lease -n %s %s -o jsonpath='{.spec.holderIdentity}' | cut -d_ -f1)\n"+
		"  kubectl exec -n %s \"$POD\" -- /nodegc explain %s -c %s\n",
		leaseNamespace, leaseName, leaseNamespace, leaseName, leaseNamespace, args, deployedConfig)
}

// printLeaderHint says which instance leads and how to ask it.
func (o *explainOptions) printLeaderHint(w io.Writer, leader, leaseNamespace, leaseName, target string) {
	args := target + " -n " + o.namespace
	if o.output != "" {
		args += " -o " + o.output
	}
	if o.config.configFile != "" {
		args += " -c " + o.config.configFile
	}
	if leader == "" {
		fmt.Fprintf(w, "The leader is not known here; it holds the Lease %s/%s:\n  kubectl get lease -n %s %s -o jsonpath='{.spec.holderIdentity}'\n",
			leaseNamespace, leaseName, leaseNamespace, leaseName)
		fmt.Fprintf(w, "then ask it:\n  kubectl exec -n %s POD -- /nodegc explain %s\n", leaseNamespace, args)
		return
	}
	// A leader's identity is its pod's name and a suffix (defaultIdentity).
	pod, _, _ := strings.Cut(leader, "_")
	fmt.Fprintf(w, "Ask the leader:\n  kubectl exec -n %s %s -- /nodegc explain %s\n", leaseNamespace, pod, args)
}

// printExplanation renders e for people: the verdict first, then what it
// rests on.
func printExplanation(out io.Writer, e *ownergc.Explanation) {
	fmt.Fprintf(out, "Verdict: %s\nCode:    %s\n\n", e.Verdict, e.Code)
	obj := &e.Object
	fmt.Fprintf(out, "Object:  %s, %s %s", describe(obj.Kind, obj.Namespace, obj.Name, string(obj.UID)), obj.APIVersion, obj.Resource)
	if !obj.Exists {
		fmt.Fprintln(out, ": not found")
	} else {
		fmt.Fprintf(out, ", resourceVersion %s\n", obj.ResourceVersion)
	}
	var state []string
	if obj.DeletionTimestamp != nil {
		state = append(state, "being deleted since "+obj.DeletionTimestamp.UTC().Format(time.RFC3339))
	}
	if len(obj.Finalizers) > 0 {
		state = append(state, "finalizers: "+strings.Join(obj.Finalizers, ", "))
	}
	if len(state) > 0 {
		fmt.Fprintf(out, "         %s\n", strings.Join(state, "; "))
	}
	if e.InGraph {
		fmt.Fprintf(out, "Graph:   observed (resourceVersion %s)\n", e.GraphResourceVersion)
	} else {
		fmt.Fprintln(out, "Graph:   not observed")
	}
	if len(e.UnsyncedResources) > 0 {
		fmt.Fprintf(out, "Cannot list now: %s\n", strings.Join(e.UnsyncedResources, ", "))
	}
	if e.DryRun {
		fmt.Fprintln(out, "Dry-run: the owner GC decides but writes nothing")
	}
	fmt.Fprintln(out)

	rows := make([][]string, 0, len(e.Owners))
	for _, o := range e.Owners {
		var flags []string
		if o.Controller {
			flags = append(flags, "controller")
		}
		if o.BlockOwnerDeletion {
			flags = append(flags, "blockOwnerDeletion")
		}
		owner := describe(o.Kind, o.Namespace, o.Name, string(o.UID))
		if o.ObservedName != "" {
			owner += " (observed as " + o.ObservedName + ")"
		}
		if len(flags) > 0 {
			owner += " [" + strings.Join(flags, ", ") + "]"
		}
		if o.Error != "" {
			owner += " error: " + o.Error
		}
		rows = append(rows, []string{o.Class, o.Reason, o.Checked, owner})
	}
	explainTable(out, fmt.Sprintf("OWNERS (%d)", len(rows)), []string{"CLASS", "REASON", "CHECKED", "OWNER"}, rows)

	rows = rows[:0]
	for _, d := range e.Dependents {
		blocks, st, fin := "no", "-", "-"
		if d.BlockOwnerDeletion {
			blocks = "yes"
		}
		switch {
		case d.Gone:
			st = "gone"
		case d.DeletingDependents:
			st = "deleting dependents"
		case d.BeingDeleted:
			st = "being deleted"
		}
		switch {
		case d.Error != "":
			fin = "(read failed: " + d.Error + ")"
		case len(d.Finalizers) > 0:
			fin = strings.Join(d.Finalizers, ", ")
		case d.BlockOwnerDeletion && !d.Read:
			fin = "(not read)"
		}
		dependent := describe(d.Kind, d.Namespace, d.Name, string(d.UID))
		if u := d.Undecided; u != nil {
			dependent += fmt.Sprintf(" (undecided: owner %s %s, %s", u.Kind, or(u.Name, "?"), u.Reason)
			if u.Error != "" {
				dependent += ": " + u.Error
			}
			dependent += ")"
		}
		rows = append(rows, []string{blocks, st, fin, dependent})
	}
	heading := "DEPENDENTS (0)"
	switch {
	case len(rows) < e.DependentsTotal:
		heading = fmt.Sprintf("DEPENDENTS (%d of %d, %d blocking)", len(rows), e.DependentsTotal, e.BlockingTotal)
	case len(rows) > 0:
		heading = fmt.Sprintf("DEPENDENTS (%d, %d blocking)", len(rows), e.BlockingTotal)
	}
	explainTable(out, heading, []string{"BLOCKS", "STATE", "FINALIZERS", "DEPENDENT"}, rows)

	rows = rows[:0]
	for _, f := range e.Finalizers {
		rows = append(rows, []string{f.Name, f.RemovedBy, or(f.Condition, "-")})
	}
	explainTable(out, fmt.Sprintf("FINALIZERS (%d)", len(rows)), []string{"FINALIZER", "REMOVED BY", "WHEN"}, rows)

	rows = rows[:0]
	for _, r := range e.Records {
		action := strings.TrimSpace(r.Action + " " + r.PropagationPolicy + " " + r.Finalizer)
		if r.DryRun {
			action += " (dry-run)"
		}
		var owners []string
		for _, o := range r.Owners {
			owners = append(owners, describe(o.Kind, o.Namespace, o.Name, string(o.UID))+": "+o.Class+", "+o.Reason)
		}
		rows = append(rows, []string{r.Time.UTC().Format(time.RFC3339), describe(r.Kind, r.Namespace, r.Name, string(r.UID)),
			action, r.Rule, or(strings.Join(owners, "; "), "-")})
	}
	explainTable(out, fmt.Sprintf("DECISION RECORDS (%d)", len(rows)), []string{"TIME", "OBJECT", "ACTION", "RULE", "OWNERS"}, rows)
}

// explainTable prints a heading and, if there are rows, an indented table.
func explainTable(out io.Writer, heading string, header []string, rows [][]string) {
	fmt.Fprintln(out, heading)
	if len(rows) > 0 {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  "+strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
		}
		tw.Flush()
	}
	fmt.Fprintln(out)
}

// describe names an object as the owner GC does: "Kind ns/name (uid …)".
func describe(kind, namespace, name, uid string) string {
	if namespace != "" {
		name = namespace + "/" + name
	}
	return fmt.Sprintf("%s %s (uid %s)", kind, name, uid)
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}
