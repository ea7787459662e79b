package testbed

import (
	"fmt"
	"net"
)

// FreePorts returns n distinct free TCP ports. Each is chosen by listening
// on port 0 of every address, so it is free on the loopback address (where
// the test-bed components bind) and on all addresses (where nodegc binds
// ":PORT" in the e2e DaemonSet). All n listeners are held until every port
// is chosen, so the ports differ from each other; they are closed before
// FreePorts returns, so another process may still take one before the
// caller's server binds it: a harness that starts a server on them retries
// with fresh ports when that happens.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
