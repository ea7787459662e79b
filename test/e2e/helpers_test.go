//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// poll calls cond every interval until it returns true or an error, or
// timeout passes (see testbed.Poll).
func poll(ctx context.Context, timeout, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := testbed.Poll(ctx, interval, cond)
	if err != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("not done within %v", timeout)
	}
	return err
}

// metrics is one scrape of a Prometheus text endpoint.
type metrics []*dto.MetricFamily

// scrape reads http://127.0.0.1:port/metrics.
func scrape(ctx context.Context, port int) (metrics, error) {
	return testbed.ScrapeMetrics(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
}

// sum adds the samples of name whose labels include kv ("k", "v", ...).
func (m metrics) sum(name string, kv ...string) float64 {
	filters := make([]string, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		filters = append(filters, kv[i]+"="+kv[i+1])
	}
	sum, _ := testbed.MetricSum(m, name, filters...)
	return sum
}

// has reports whether a sample of name exists.
func (m metrics) has(name string) bool {
	_, ok := testbed.MetricSum(m, name)
	return ok
}

// checkGOMAXPROCS wants an agent's Go runtime to run with the GOMAXPROCS
// its manifest sets from its CPU limit, which the kubelet resolves
// (resourceFieldRef limits.cpu), as deploy's test computes it and the
// benchmarks run nodegc: the Prometheus client's Go collector exports it
// as go_sched_gomaxprocs_threads. It returns the value read and whether
// it is the one wanted.
func checkGOMAXPROCS(t testing.TB, where string, m metrics) (got string, ok bool) {
	t.Helper()
	got = "none"
	if m.has("go_sched_gomaxprocs_threads") {
		got = fmt.Sprint(m.sum("go_sched_gomaxprocs_threads"))
	}
	if ok = got == nodegcproc.DeployedGOMAXPROCS; !ok {
		t.Errorf("%s /metrics: go_sched_gomaxprocs_threads %s, want %s: the kubelet did not resolve the manifest's GOMAXPROCS (resourceFieldRef limits.cpu) as deploy's test expects", where, got, nodegcproc.DeployedGOMAXPROCS)
	}
	return got, ok
}

// table logs rows as aligned columns under a title.
func table(t testing.TB, title string, header []string, rows [][]string) {
	t.Helper()
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
	t.Logf("%s\n%s", title, b.String())
}

// podContainers lists the runtime's containers of a pod (by the kubelet's
// pod UID label), oldest first.
func podContainers(ctx context.Context, rt runtimeapi.RuntimeServiceClient, uid string) ([]*runtimeapi.Container, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		return nil, err
	}
	cs := resp.GetContainers()
	sort.Slice(cs, func(i, j int) bool { return cs[i].GetCreatedAt() < cs[j].GetCreatedAt() })
	return cs, nil
}

// podSandboxes lists the runtime's sandboxes of a pod.
func podSandboxes(ctx context.Context, rt runtimeapi.RuntimeServiceClient, uid string) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		return nil, err
	}
	return resp.GetItems(), nil
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// podReady reports whether a pod is Running with every container ready.
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// describePod summarizes a pod's status for failure messages.
func describePod(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s phase=%s node=%q", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, " %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, " [%s ready=%t restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
		switch {
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s: %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated %s exit %d", cs.State.Terminated.Reason, cs.State.Terminated.ExitCode)
		case cs.State.Running != nil:
			b.WriteString(" running")
		}
		b.WriteString("]")
	}
	return b.String()
}

// runsDelta lists the image GC runs between two scrapes by trigger and
// result.
func runsDelta(before, after metrics) string {
	var runs []string
	for _, trig := range []string{"threshold", "projected", "periodic"} {
		for _, res := range []string{"success", "not_enough", "error"} {
			if d := after.sum("nodegc_image_gc_runs_total", "trigger", trig, "result", res) - before.sum("nodegc_image_gc_runs_total", "trigger", trig, "result", res); d > 0 {
				runs = append(runs, fmt.Sprintf("%s/%s +%v", trig, res, d))
			}
		}
	}
	if len(runs) == 0 {
		return "none"
	}
	return strings.Join(runs, ", ")
}
