package testbed

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target address,
// byte for byte (TLS passes through), and can cut them: a test puts it
// between one client and kube-apiserver to take that client, and only it,
// off the network for a while.
type Proxy struct {
	// Addr is the proxy's address, 127.0.0.1:PORT.
	Addr string

	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	lis   net.Listener // nil while refusing
	cut   bool
	conns map[net.Conn]struct{}
}

// StartProxy listens on a free loopback port and forwards to target until
// Close.
func StartProxy(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &Proxy{Addr: lis.Addr().String(), target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Go(func() { p.accept(lis) })
	return p, nil
}

func (p *Proxy) accept(lis net.Listener) {
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close() // cut: the client sees its connection closed at once
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track registers c unless the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(server) {
		if server != nil {
			_ = server.Close()
		}
		p.drop(client)
		return
	}
	var both sync.WaitGroup
	// Either direction ending (EOF, a reset, a cut) closes both ends.
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		p.drop(dst)
		p.drop(src)
	}
	both.Go(func() { pipe(server, client) })
	both.Go(func() { pipe(client, server) })
	both.Wait()
}

func (p *Proxy) drop(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

// Cut closes every forwarded connection and closes new ones at once, until
// Resume.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

// Refuse is Cut, and new connections are refused (ECONNREFUSED, as from a
// server that is down, where Cut accepts and closes them) until Resume.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	lis := p.lis
	p.lis = nil
	p.mu.Unlock()
	if lis != nil {
		_ = lis.Close()
	}
	p.Cut()
}

// Resume forwards new connections again after Cut or Refuse.
func (p *Proxy) Resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if p.lis != nil {
		return nil
	}
	lis, err := net.Listen("tcp", p.Addr)
	if err != nil {
		return fmt.Errorf("proxy: listen again on %s: %w", p.Addr, err)
	}
	p.lis = lis
	p.wg.Go(func() { p.accept(lis) })
	return nil
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.Refuse()
	p.wg.Wait()
}
