package cluster

import (
	"fmt"
	"syscall"

	"github.com/nodegc/nodegc/internal/testbed"
)

// maxStartAttempts bounds the retries on proc.ErrAddrInUse.
const maxStartAttempts = 5

// pickPorts is testbed.FreePorts; tests replace it to simulate a lost
// race. The ports are free when picked, not when our child binds them
// (hence proc.ErrAddrInUse and the retries).
var pickPorts = testbed.FreePorts

// reservation holds a port bound but not listening: the kernel hands it to
// no one else (neither bind to port 0 nor connect's choice of a local
// port), while connections to it are refused, as for a stopped server.
type reservation struct{ fd int }

// reservePort binds a socket to 127.0.0.1:port without listening.
// SO_REUSEADDR lets the bind succeed beside the TIME_WAIT connections a
// server just closed.
func reservePort(port int) (*reservation, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("reserve port %d: socket: %w", port, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("reserve port %d: SO_REUSEADDR: %w", port, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("reserve port %d: bind: %w", port, err)
	}
	return &reservation{fd: fd}, nil
}

// release frees the port. It is safe on a nil reservation.
func (r *reservation) release() {
	if r != nil {
		_ = syscall.Close(r.fd)
	}
}
