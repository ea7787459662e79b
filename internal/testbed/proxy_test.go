package testbed

import (
	"bufio"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return line, err
}

// echoProxy starts a proxy to an echo server and a connection through
// it; both close when the test ends.
func echoProxy(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := StartProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

// dialEcho dials the proxy after Resume and expects msg echoed.
func dialEcho(t *testing.T, p *Proxy, msg string) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, msg); err != nil || got != msg+"\n" {
		t.Fatalf("after Resume: %q, %v; want the echo", got, err)
	}
}

func TestProxyCutAndResume(t *testing.T) {
	p, c := echoProxy(t)
	if got, err := roundTrip(c, "one"); err != nil || got != "one\n" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}

	p.Cut()
	if _, err := roundTrip(c, "two"); err == nil {
		t.Error("a connection forwarded before Cut still works after it")
	}
	c2, err := net.Dial("tcp", p.Addr)
	if err == nil {
		if _, err := roundTrip(c2, "three"); err == nil {
			t.Error("a new connection works while cut")
		}
		_ = c2.Close()
	}

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	dialEcho(t, p, "four")
}

func TestProxyRefuseAndResume(t *testing.T) {
	p, c := echoProxy(t)

	p.Refuse()
	if _, err := roundTrip(c, "one"); err == nil {
		t.Error("a connection forwarded before Refuse still works after it")
	}
	if c2, err := net.Dial("tcp", p.Addr); !errors.Is(err, syscall.ECONNREFUSED) {
		if c2 != nil {
			_ = c2.Close()
		}
		t.Errorf("dial while refusing: %v; want connection refused", err)
	}

	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	dialEcho(t, p, "two")
}
