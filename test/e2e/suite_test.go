//go:build e2e

package e2e

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed/kubecluster"
	"github.com/nodegc/nodegc/internal/testbed/registry"
)

// imageFSSize is the size of the node's image filesystem: small enough
// that the suite fills it in seconds, large enough for nodegc's own image
// (about 80 MB unpacked plus its blob) and the test images.
const imageFSSize = 768 << 20

// nodeFSSize is the size of the kubelet's root directory's filesystem (its
// nodefs): the disk pressure cases give the kubelet evictionHard
// nodefs.available<10%, which on the host's disk would depend on how full
// the machine is (a CI machine's disk can be 85% full), not on the test.
const nodeFSSize = 256 << 20

// suite is the state the e2e cases share: one cluster, nodegc deployed on
// it once.
type suite struct {
	kc     *kubecluster.Cluster
	client kubernetes.Interface

	image, imageID                                               string
	stateDir                                                     string
	healthzPort, metricsPort, ownerHealthzPort, ownerMetricsPort int
	nodePod, ownerPod                                            *corev1.Pod

	// nodegcConfig is the configuration the suite deployed (the
	// ConfigMap's config.yaml after adaptForTestNode).
	nodegcConfig string
	// manifest is the file the suite applied with kubectl (the rendered and
	// adapted deploy/daemonset.yaml).
	manifest string

	// Test images in the node's registry.
	sleepImage, crashImage *registry.Image

	// dpA is run (a) of the disk pressure comparison, when it ran.
	dpA *dpResult
}

// TestE2E deploys nodegc on a real single-node cluster and checks its three
// collectors there. The cases run in order on the same cluster; each
// creates its own namespace.
func TestE2E(t *testing.T) {
	tarPath := imageTarball(t)
	began := time.Now()
	kc := kubecluster.Start(t, kubecluster.Options{ImageFSSize: imageFSSize, NodeFSSize: nodeFSSize})
	s := &suite{kc: kc, client: kc.Client()}
	clusterUp := time.Since(began)

	s.pushTestImages(t)
	// First, before nodegc is deployed: the kubelet's own image GC and
	// eviction as the baseline of the disk pressure comparison.
	t.Run("DiskPressureKubelet", s.testDiskPressureKubelet)

	deployBegan := time.Now()
	s.pushImage(t, tarPath)
	objs := s.renderForNode(t)
	s.adaptForTestNode(t, objs)
	s.apply(t, objs)
	s.waitDeployed(t)
	t.Logf("cluster up in %v, nodegc deployed and running in %v", clusterUp.Round(time.Millisecond), time.Since(deployBegan).Round(time.Millisecond))

	t.Run("OwnerGC", s.testOwnerGC)
	t.Run("ContainerGCRestarts", s.testContainerGCRestarts)
	t.Run("ContainerGCDeletedPod", s.testContainerGCDeletedPod)
	t.Run("ContainerGCBytes", s.testContainerGCBytes)
	t.Run("ImageGCInUseTooBig", s.testImageGCInUseTooBig)
	t.Run("ImageGCThreshold", s.testImageGCThreshold)
	t.Run("ScheduledImageKept", s.testScheduledImageKept)
	t.Run("Metrics", s.testMetrics)
	t.Run("Events", s.testEvents)
	// The runtime's outage fails container GC runs (ContainerGCFailed
	// Events, as the kubelet's), which the cases above must not see.
	t.Run("RuntimeRestart", s.testRuntimeRestart)
	// Last: it restarts the kubelet and nodegc with other settings (and
	// back).
	t.Run("DiskPressureNodegc", s.testDiskPressureNodegc)
	// After every case of the kubectl-applied manifest: the same node agent
	// and owner collector installed with helm from deploy/helm/nodegc.
	t.Run("HelmInstall", s.testHelmInstall)
	t.Logf("e2e cases done %v after start", time.Since(began).Round(time.Millisecond))
}

func (s *suite) pushTestImages(t *testing.T) {
	ctx := t.Context()
	var err error
	if s.sleepImage, err = s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "e2e/sleep"}); err != nil {
		t.Fatal(err)
	}
	if s.crashImage, err = s.kc.Node.Registry.Push(ctx, registry.ImageSpec{Repo: "e2e/crash", Cmd: []string{"exit", "1"}}); err != nil {
		t.Fatal(err)
	}
}

// namespace creates a namespace for a case and waits for its "default"
// ServiceAccount (kube-controller-manager's serviceaccount-controller).
func (s *suite) namespace(t *testing.T, name string) string {
	ctx := t.Context()
	if _, err := s.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("namespace %s: no default ServiceAccount: %v", name, err)
	}
	return name
}

// podSpec is a host-network pod spec with one container.
func podSpec(image string, args ...string) corev1.PodSpec {
	return corev1.PodSpec{
		HostNetwork:                   true,
		TerminationGracePeriodSeconds: ptr.To[int64](2),
		Containers:                    []corev1.Container{{Name: "app", Image: image, Args: args, ImagePullPolicy: corev1.PullIfNotPresent}},
	}
}

// waitPod polls a pod until cond holds.
func (s *suite) waitPod(t *testing.T, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := poll(t.Context(), timeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		p, err := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not %s: %v: %s", ns, name, what, err, describePod(last))
	}
	return last
}

// waitPodGone waits until a pod is deleted from the API.
func (s *suite) waitPodGone(t *testing.T, ns, name string, timeout time.Duration) {
	t.Helper()
	err := poll(t.Context(), timeout, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
		_, err := s.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not gone: %v", ns, name, err)
	}
}

// nodeMetrics scrapes the DaemonSet pod's /metrics on the node's loopback.
func (s *suite) nodeMetrics(t *testing.T) metrics {
	t.Helper()
	m, err := scrape(t.Context(), s.metricsPort)
	if err != nil {
		t.Fatalf("scrape the DaemonSet pod's /metrics: %v", err)
	}
	return m
}

// ownerMetrics scrapes the owner collector's /metrics.
func (s *suite) ownerMetrics(t *testing.T) metrics {
	t.Helper()
	m, err := scrape(t.Context(), s.ownerMetricsPort)
	if err != nil {
		t.Fatalf("scrape the owner collector's /metrics: %v", err)
	}
	return m
}

// logRecord is one structured log line of an agent.
type logRecord struct {
	msg string
	kv  map[string]string
	// at is when the runtime wrote the line (the CRI log line's timestamp).
	at time.Time
}

// agentLog reads the log of a pod's container from the node's pod logs
// directory (the CRI log files the kubelet points containerd at: the Node
// has no reachable address, so no `kubectl logs`) and returns the klog
// records whose message is msg.
func (s *suite) agentLog(t *testing.T, pod *corev1.Pod, msg string) []logRecord {
	t.Helper()
	var out []logRecord
	for _, f := range s.agentLogFiles(pod) {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 256<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			q := `"` + msg + `"`
			i := strings.Index(line, "] "+q)
			if i < 0 {
				continue
			}
			rec := logRecord{msg: msg, kv: parseKV(line[i+2+len(q):])}
			if ts, _, ok := strings.Cut(line, " "); ok {
				rec.at, _ = time.Parse(time.RFC3339Nano, ts)
			}
			out = append(out, rec)
		}
		fh.Close()
	}
	return out
}

// agentLogFiles returns the CRI log files of pod's first container, one
// per run of it (0.log, 1.log, ... after restarts), oldest first.
func (s *suite) agentLogFiles(pod *corev1.Pod) []string {
	dir := filepath.Join(s.kc.PodLogsDir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), pod.Spec.Containers[0].Name)
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.SortFunc(files, func(a, b string) int { return cmp.Compare(logIndex(a), logIndex(b)) })
	return files
}

// logIndex is N of a CRI log file N.log (-1 if it is not one).
func logIndex(path string) int {
	n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(path), ".log"))
	if err != nil {
		return -1
	}
	return n
}

// agentLogTail returns the last n lines of one of pod's klog loggers (e.g.
// node-gc.image-gc), each cut to its time, message and values (at most
// 200 characters), on one line: what a failure message quotes so that the
// agent's side of it shows in CI's summary.
func (s *suite) agentLogTail(t *testing.T, pod *corev1.Pod, logger string, n int) string {
	t.Helper()
	var tail []string
	tag := ` logger="` + logger + `"`
	for _, f := range s.agentLogFiles(pod) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(data)) {
			if !strings.Contains(line, tag) {
				continue
			}
			// "<CRI time> stderr F I1126 13:14:40.322156       1 manager.go:255] "msg" logger=... k=v"
			_, klogLine, _ := strings.Cut(strings.TrimSpace(line), " F ")
			fields := strings.Fields(klogLine)
			_, rest, ok := strings.Cut(klogLine, "] ")
			if !ok || len(fields) < 2 {
				continue
			}
			rec := fields[1] + " " + strings.Replace(rest, tag, "", 1)
			if len(rec) > 200 {
				rec = rec[:200] + "..."
			}
			tail = append(tail, rec)
		}
	}
	tail = tail[max(0, len(tail)-n):]
	return strings.Join(tail, " | ")
}

// parseKV parses klog's ` key="value" key=value` pairs.
func parseKV(s string) map[string]string {
	kv := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			// A Go-quoted string: find its end.
			end := 1
			for end < len(rest) && rest[end] != '"' {
				if rest[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(rest) {
				end = len(rest) - 1
			}
			raw := rest[:end+1]
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				v = strings.Trim(raw, `"`)
			}
			rest = rest[end+1:]
		} else if strings.HasPrefix(rest, "[") || strings.HasPrefix(rest, "{") {
			depth, end := 0, 0
			for end < len(rest) {
				switch rest[end] {
				case '[', '{':
					depth++
				case ']', '}':
					depth--
				}
				end++
				if depth == 0 {
					break
				}
			}
			v, rest = rest[:end], rest[end:]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		kv[k] = v
		s = rest
	}
	return kv
}
