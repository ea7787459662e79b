package testbed_test

import (
	"fmt"
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
			// FreePorts closes its listeners before it returns, so any
			// process on the machine may take one of the ports before
			// the test binds it (go test ./... runs other packages' servers
			// and clients beside this one): a port found taken is retried
			// with fresh ports, a few times. Ports that are not distinct or
			// out of range fail at once.
			const tries = 5
			for try := 1; ; try++ {
				taken := bindEach(t, freePorts(t, n))
				if taken == "" {
					return
				}
				if try == tries {
					t.Fatalf("a port FreePorts returned could not be bound in each of %d tries; the last: %s", tries, taken)
				}
				t.Logf("try %d: %s; trying fresh ports", try, taken)
			}
		})
	}
}

// freePorts returns FreePorts(n), failing the test unless they are n
// distinct ports in range.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
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
			t.Fatalf("port %d out of range", p)
		}
		if seen[p] {
			t.Fatalf("port %d returned twice: %v", p, ports)
		}
		seen[p] = true
	}
	return ports
}

// bindEach binds each port on the loopback address, then on every address,
// and says which could not be bound ("" when each could).
func bindEach(t *testing.T, ports []int) string {
	t.Helper()
	for _, p := range ports {
		for _, host := range []string{"127.0.0.1", ""} {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				return fmt.Sprintf("port %d not free on %q: %v", p, host, err)
			}
			_ = l.Close()
		}
	}
	return ""
}
