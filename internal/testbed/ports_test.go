package testbed_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

// TestFreePorts: the n ports differ from each other (all n listeners are
// held until every port is chosen), and each can then be bound both on the
// loopback address (the test-bed components) and on every address (nodegc
// in the e2e DaemonSet binds ":PORT").
func TestFreePorts(t *testing.T) {
	for name, n := range map[string]int{"one": 1, "two": 2, "many": 64} {
		t.Run(name, func(t *testing.T) {
			ports, err := testbed.FreePorts(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(ports) != n {
				t.Fatalf("FreePorts(%d) returned %d ports: %v", n, len(ports), ports)
			}
			seen := map[int]bool{}
			for _, p := range ports {
				if p <= 0 || p > 65535 {
					t.Errorf("port %d out of range", p)
				}
				if seen[p] {
					t.Errorf("port %d returned twice: %v", p, ports)
				}
				seen[p] = true
				for _, host := range []string{"127.0.0.1", ""} {
					l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
					if err != nil {
						t.Errorf("port %d not free on %q: %v", p, host, err)
						continue
					}
					_ = l.Close()
				}
			}
		})
	}
}
