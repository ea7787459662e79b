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

func TestProxyCutAndResume(t *testing.T) {
	p, err := StartProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "four"); err != nil || got != "four\n" {
		t.Fatalf("after Resume: %q, %v; want the echo", got, err)
	}
}

func TestProxyRefuseAndResume(t *testing.T) {
	p, err := StartProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

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
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "two"); err != nil || got != "two\n" {
		t.Fatalf("after Resume: %q, %v; want the echo", got, err)
	}
}
