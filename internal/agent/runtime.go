package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
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
	// imageEndpoint is the image service's endpoint when it is another
	// (imageServiceEndpoint): a lost connection may be that one's.
	imageEndpoint string
	clock         clock.PassiveClock
	logger        klog.Logger

	// reconnected receives a token at each return of the connection (not
	// at the first): the runtime may have been replaced meanwhile.
	reconnected chan struct{}

	mu         sync.Mutex
	lostAt     time.Time // zero while connected
	reconnects int
	// dialErr is why the last of attempts dials (connect) failed, nextDial
	// when the next one begins; nil and 0 once one succeeded.
	dialErr  error
	attempts int
	nextDial time.Time
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
		if r.imageEndpoint != "" {
			r.logger.Info("Lost the connection to the container runtime or to its image service; redialing, node GC fails until it is back",
				"endpoint", r.endpoint, "imageEndpoint", r.imageEndpoint)
			return
		}
		r.logger.Info("Lost the connection to the container runtime; redialing, node GC fails until it is back", "endpoint", r.endpoint)
		return
	}
	r.reconnects++
	kv := []any{"endpoint", r.endpoint, "downFor", now.Sub(r.lostAt).Round(time.Millisecond), "reconnects", r.reconnects}
	if r.imageEndpoint != "" {
		kv = append(kv, "imageEndpoint", r.imageEndpoint)
	}
	r.logger.Info("Reconnected to the container runtime", kv...)
	r.lostAt = time.Time{}
	select {
	case r.reconnected <- struct{}{}:
	default:
	}
}

// dialFailed notes that a dial (cri.Dial in connect) failed with err, and
// that the next one begins after retryIn.
func (r *runtimeLink) dialFailed(err error, retryIn time.Duration) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialErr, r.nextDial = err, now.Add(retryIn)
	r.attempts++
}

// dialed notes that a dial succeeded.
func (r *runtimeLink) dialed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialErr, r.attempts, r.nextDial = nil, 0, time.Time{}
}

// explain says, for /readyz, why the last dial failed (with what to do,
// dialHint), which attempt it was and when the next is, since when the
// runtime is unreachable, and what the socket path holds (socketProblem).
func (r *runtimeLink) explain() string {
	r.mu.Lock()
	lostAt, dialErr, attempts, nextDial := r.lostAt, r.dialErr, r.attempts, r.nextDial
	r.mu.Unlock()
	var s string
	if dialErr != nil {
		s = ": " + dialErr.Error()
		if hint := dialHint(dialErr); hint != "" {
			s += ": " + hint
		}
		if left := nextDial.Sub(r.clock.Now()); left > 0 {
			s += fmt.Sprintf("; attempt %d, next in %v", attempts, left.Round(time.Second))
		} else {
			s += fmt.Sprintf("; attempt %d failed, attempt %d under way", attempts, attempts+1)
		}
	}
	if !lostAt.IsZero() {
		s += fmt.Sprintf(" (connection lost at %s, %v ago; redialing)", stamp(lostAt), since(r.clock.Now(), lostAt))
	}
	if p := socketProblem(r.endpoint); p != "" {
		s += " (" + p + ")"
	}
	return s
}

// dialHint says what to do about err, a failed cri.Dial, when the socket
// answered but serves no CRI v1 (codes.Unimplemented): a runtime that runs
// without it, such as Docker Engine's containerd, whose cri plugin is
// disabled while the kubelet talks to cri-dockerd. "" for other errors.
func dialHint(err error) string {
	if grpcstatus.Code(err) != codes.Unimplemented {
		return ""
	}
	if strings.Contains(err.Error(), "runtime.v1.ImageService") {
		return "the image service's socket serves no CRI v1 ImageService: set imageServiceEndpoint to the kubelet's " +
			"--image-service-endpoint, or leave it empty for the runtime's"
	}
	return "this socket serves no CRI v1 RuntimeService (a containerd with its cri plugin disabled, as Docker Engine's is, " +
		"whose kubelet talks to cri-dockerd; a runtime too old for CRI v1, such as containerd before 1.6; or the socket of " +
		"another service): set containerRuntimeEndpoint to the kubelet's --container-runtime-endpoint"
}

// socketProblem says what is wrong with the socket path of a unix://
// endpoint, "" when it is a socket (or the endpoint is no unix one): a
// path that is gone, a file that is no socket (what a container sees
// after the runtime restarted, when it mounted the socket file instead of
// its directory), or a symbolic link whose target is not reachable in
// nodegc's container (containerd's socket linked to k3s's, with only the
// link's directory mounted), which a plain stat calls "no such file or
// directory" while the operator sees the socket on the host.
func socketProblem(ep string) string {
	path, err := endpoint.SocketPath(ep)
	if err != nil {
		return ""
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSymlink {
		if target, err := os.Readlink(path); err == nil {
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(path), target)
			}
			if _, err := os.Stat(path); err != nil {
				var cause string // absent: the usual case, said by "not reachable"
				if !errors.Is(err, fs.ErrNotExist) {
					cause = fmt.Sprintf(" (%v)", unwrapPath(err))
				}
				return fmt.Sprintf("%s is a symbolic link to %s, which is not reachable in nodegc's container%s: "+
					"set containerRuntimeEndpoint to unix://%s and mount its directory, %s (the Helm chart's runtime.socket does both)",
					path, target, cause, target, filepath.Dir(target))
			}
		}
	}
	switch fi, err := os.Stat(path); {
	case err != nil:
		return err.Error()
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Sprintf("%s is not a socket: mount the socket's directory, not the socket file, so that a restarted runtime's new socket is seen", path)
	}
	return ""
}

// unwrapPath returns the cause of a *fs.PathError (the path is said
// already), or err.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
