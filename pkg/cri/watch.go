package cri

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// connState is what the connection watchers know; mu guards it whole. Each
// watcher writes its own connection's entry; the client is connected while
// every connection is READY, and talks CRI while it is connected and
// talking.
type connState struct {
	mu        sync.Mutex
	ready     []bool
	everReady []bool
	connected bool // every connection READY, as last reported
	reported  bool // the client was connected once: later changes are reported
	// talking is set once Dial's checks passed, cleared by a RefreshVersion
	// that fails until one answers, and by Close: the runtime answers CRI
	// v1 on the connection.
	talking bool
	// generation counts the losses of a connection that was READY
	// (Client.Generation).
	generation uint64
}

// watch starts one goroutine per connection that follows its connectivity
// state until Close: a connection that goes IDLE (its transport closed: the
// runtime went away) is redialed at once rather than at the next call, every
// return to READY after the first counts as a reconnect, and the client's
// connected state goes to metrics and onChange. The watchers keep ctx's
// values, not its end: they live until Close.
func (c *Client) watch(ctx context.Context, m *Metrics, onChange func(bool)) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stopWatching = cancel
	c.conn = connState{ready: make([]bool, len(c.conns)), everReady: make([]bool, len(c.conns))}
	for i, conn := range c.conns {
		c.watchers.Go(func() { c.watchConn(ctx, i, conn, m, onChange) })
	}
}

// watchedConn is what a watcher uses of a *grpc.ClientConn.
type watchedConn interface {
	GetState() connectivity.State
	WaitForStateChange(ctx context.Context, source connectivity.State) bool
	Connect()
}

var _ watchedConn = (*grpc.ClientConn)(nil)

func (c *Client) watchConn(ctx context.Context, i int, conn watchedConn, m *Metrics, onChange func(bool)) {
	state := conn.GetState()
	for {
		if state == connectivity.Shutdown {
			return // closed: Close reports nothing
		}
		if state == connectivity.Idle {
			conn.Connect()
		}
		c.observe(i, state == connectivity.Ready, m, onChange)
		if !conn.WaitForStateChange(ctx, state) {
			return
		}
		left := state
		state = conn.GetState()
		if left == connectivity.Ready && state == connectivity.Ready {
			// It left READY and came back before this read (a runtime
			// that restarted and answered a redial at once): a loss all
			// the same, or the generation would miss the restart.
			c.observe(i, false, m, onChange)
		}
	}
}

// observe records connection i's readiness and reports what changed, in
// order: under the lock.
func (c *Client) observe(i int, ready bool, m *Metrics, onChange func(bool)) {
	s := &c.conn
	s.mu.Lock()
	defer s.mu.Unlock()
	reconnected := ready && !s.ready[i] && s.everReady[i]
	if !ready && s.ready[i] {
		s.generation++
	}
	s.ready[i] = ready
	s.everReady[i] = s.everReady[i] || ready
	all := true
	for _, r := range s.ready {
		all = all && r
	}
	changed := all != s.connected
	s.connected = all
	report := changed && s.reported
	s.reported = s.reported || all
	if m != nil {
		if reconnected {
			m.reconnects.Inc()
		}
		m.setConnected(all && s.talking)
	}
	if report && onChange != nil {
		onChange(all)
	}
}

// setTalking records whether the runtime answers CRI on the connection
// (Dial's checks, RefreshVersion; false at Close), and sets
// nodegc_cri_connected to whether the client talks CRI to it now.
func (c *Client) setTalking(talking bool) {
	s := &c.conn
	s.mu.Lock()
	defer s.mu.Unlock()
	s.talking = talking
	if c.metrics != nil {
		c.metrics.setConnected(s.connected && talking)
	}
}

// Generation numbers the client's connection to the runtime: 0 from Dial,
// one more at each loss of the runtime's or the image service's
// connection, counted as soon as the client sees the transport close
// (long before a restarted runtime answers on a new one). What was read of
// the runtime on one generation may not hold on the next: the runtime may
// have restarted with another configuration, or been replaced.
func (c *Client) Generation() uint64 {
	c.conn.mu.Lock()
	defer c.conn.mu.Unlock()
	return c.conn.generation
}
