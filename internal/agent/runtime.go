package agent

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodegc/nodegc/internal/endpoint"
)

// RuntimeCheckTimeout bounds how long /readyz waits for the runtime to
// answer CRI Version: a probe of /readyz needs a longer timeout.
const RuntimeCheckTimeout = 5 * time.Second

// runtimeLink follows the agent's connection to the container runtime, as
// cri.Client's watchers report it, for the log and /readyz. One lock guards
// it whole.
type runtimeLink struct {
	endpoint string
	clock    clock.PassiveClock
	logger   klog.Logger

	// reconnected receives a token at each return of the connection (not
	// at the first): the runtime may have been replaced meanwhile.
	reconnected chan struct{}

	mu         sync.Mutex
	lostAt     time.Time // zero while connected
	reconnects int
}

func newRuntimeLink(logger klog.Logger, endpoint string, clk clock.PassiveClock) *runtimeLink {
	return &runtimeLink{endpoint: endpoint, clock: clk, logger: logger, reconnected: make(chan struct{}, 1)}
}

// changed is the client's OnConnectionChange: it logs the loss and the
// return of the connection (the client redials by itself meanwhile).
func (r *runtimeLink) changed(connected bool) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !connected {
		r.lostAt = now
		r.logger.Info("Lost the connection to the container runtime; redialing, node GC fails until it is back", "endpoint", r.endpoint)
		return
	}
	r.reconnects++
	r.logger.Info("Reconnected to the container runtime", "endpoint", r.endpoint, "downFor", now.Sub(r.lostAt).Round(time.Millisecond), "reconnects", r.reconnects)
	r.lostAt = time.Time{}
	select {
	case r.reconnected <- struct{}{}:
	default:
	}
}

// explain says, for /readyz, since when the runtime is unreachable and
// what the socket path holds: a socket file that is gone or is no socket
// (what a container sees after the runtime restarted, when it mounted the
// socket file instead of its directory) is named.
func (r *runtimeLink) explain() string {
	r.mu.Lock()
	lostAt := r.lostAt
	r.mu.Unlock()
	var s string
	if !lostAt.IsZero() {
		s = fmt.Sprintf(" (connection lost at %s, %v ago; redialing)", stamp(lostAt), since(r.clock.Now(), lostAt))
	}
	path, err := endpoint.SocketPath(r.endpoint)
	if err != nil {
		return s
	}
	switch fi, err := os.Stat(path); {
	case err != nil:
		s += fmt.Sprintf(" (%v)", err)
	case fi.Mode().Type() != fs.ModeSocket:
		s += fmt.Sprintf(" (%s is not a socket: mount the socket's directory, not the socket file, so that a restarted runtime's new socket is seen)", path)
	}
	return s
}
