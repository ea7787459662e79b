//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// poll calls cond every interval until it returns true or an error, or
// timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, cond func(ctx context.Context) (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, cond)
	if wait.Interrupted(err) {
		return fmt.Errorf("not done within %v", timeout)
	}
	return err
}

// metrics is one scrape of a Prometheus text endpoint.
type metrics []sample

type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads http://127.0.0.1:port/metrics.
func scrape(ctx context.Context, port int) (metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("/metrics: %s: %s", resp.Status, body)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics parses the Prometheus text format: enough for the counters
// and gauges the suite reads (no escapes in label values are needed).
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var s sample
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 && i < strings.IndexByte(line, ' ') {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				return nil, fmt.Errorf("metrics: malformed line %q", line)
			}
			s.name = line[:i]
			s.labels = map[string]string{}
			for pair := range strings.SplitSeq(line[i+1:j], ",") {
				k, v, ok := strings.Cut(pair, "=")
				if ok {
					s.labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
				}
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			name, r, _ := strings.Cut(line, " ")
			s.name, rest = name, strings.TrimSpace(r)
		}
		val, _, _ := strings.Cut(rest, " ")
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value of %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// sum adds the samples of name whose labels include kv ("k", "v", ...).
func (m metrics) sum(name string, kv ...string) float64 {
	var total float64
	for _, s := range m {
		if s.name != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			if s.labels[kv[i]] != kv[i+1] {
				match = false
				break
			}
		}
		if match {
			total += s.value
		}
	}
	return total
}

// has reports whether a sample of name exists.
func (m metrics) has(name string) bool {
	for _, s := range m {
		if s.name == name {
			return true
		}
	}
	return false
}

// freePorts returns n distinct free TCP ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
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
