package cluster

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestStartRetriesTakenPorts makes the first port picked for etcd and for
// kube-apiserver one that another process holds, as when a parallel test
// package wins the race for it, and checks that Start retries with fresh
// ports.
func TestStartRetriesTakenPorts(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	handedOut := map[int]bool{} // by n: the taken port was handed out once
	pickPorts = func(n int) ([]int, error) {
		ports, err := testbed.FreePorts(n)
		mu.Lock()
		defer mu.Unlock()
		if err == nil && !handedOut[n] {
			handedOut[n] = true
			ports[0] = taken
		}
		return ports, err
	}
	t.Cleanup(func() { pickPorts = testbed.FreePorts })

	var logs []string
	rec := &recordingTB{TB: t, logs: &logs}
	c := Start(rec, Options{})
	if used := []int{c.EtcdClientPort, c.EtcdPeerPort, c.APIServerPort}; slices.Contains(used, taken) {
		t.Errorf("cluster uses the taken port %d: %v", taken, used)
	}
	for _, want := range []string{"etcd attempt 1: a port was taken", "kube-apiserver attempt 1: port"} {
		if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, want) }) {
			t.Errorf("no log line containing %q; logs:\n%s", want, strings.Join(logs, "\n"))
		}
	}
	if _, err := c.Client().CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("cluster not usable after the retries: %v", err)
	}
}

// recordingTB records what is logged through it.
type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	logs *[]string
}

func (r *recordingTB) Logf(format string, args ...any) {
	r.TB.Helper()
	r.mu.Lock()
	*r.logs = append(*r.logs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.TB.Logf(format, args...)
}

// TestReservePortRefusesConnections: a reserved port refuses connections,
// like a stopped server's, and is free again after release.
func TestReservePortRefusesConnections(t *testing.T) {
	ports, err := testbed.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	r, err := reservePort(ports[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial a reserved port: got %v, want connection refused", err)
	}
	r.release()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen after release: %v", err)
	}
	_ = l.Close()
}
