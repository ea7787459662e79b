package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// subscribeSettle is how long WatchContainerEvents waits, after opening the
// stream, before it takes the runtime to have subscribed it when no event
// came first. The runtime subscribes when it handles the request and sends
// nothing back before the first event, so there is no earlier sign.
const subscribeSettle = 500 * time.Millisecond

// WatchContainerEvents streams container events (created, started, stopped,
// deleted) to handle until ctx ends or the stream breaks. It blocks; the
// stream has no deadline other than ctx.
//
// connected, if not nil, is called once when the runtime has subscribed the
// stream (its first event arrived, or the stream stayed open for
// subscribeSettle), so that a caller can then list what exists: every
// change after that listing comes as an event. handle and connected run on
// the goroutine that reads the stream and must return quickly: while they
// run, the runtime's event queue fills, and containerd then blocks the
// calls that publish events (CreateContainer, StartContainer,
// StopContainer, RemoveContainer). So it does for as long as the process
// does not run at all (stopped, frozen): a subscription puts the caller in
// the path of every container's lifecycle on the node.
//
// When the runtime does not offer the stream (containerd 1.6 without it
// enabled), the error wraps ErrUnsupported; callers then poll
// ListContainers. So it does when the runtime ends the stream cleanly before
// its first event, before it could count as subscribed: the stream is
// switched off (CRI-O with enable_pod_events = false returns at once, and
// would do so again at every reopening). A stream that ends cleanly later
// was closed by the runtime (a shutdown): the caller reopens it. containerd
// before 2.0 is not subscribed at all (sharedEventQueue), whichever version
// answered at Dial: Version is asked before each subscription.
func (c *Client) WatchContainerEvents(ctx context.Context, connected func(), handle func(*runtimeapi.ContainerEventResponse)) error {
	// The runtime that answers now, not the one at Dial: a stream reopened
	// after a restart may meet another version (an in-place downgrade to
	// containerd 1.7, whose queue the kubelet shares), before the caller
	// has noticed.
	v, err := c.Version(ctx)
	if err != nil {
		return fmt.Errorf("container events: runtime version: %w", err)
	}
	if why := sharedEventQueue(v); why != "" {
		return fmt.Errorf("container events: %s: %w", why, ErrUnsupported)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return classifyStreamError(err)
	}
	type received struct {
		ev  *runtimeapi.ContainerEventResponse
		err error
	}
	events := make(chan received)
	go func() {
		for {
			ev, err := stream.Recv()
			select {
			case events <- received{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	settle := time.NewTimer(subscribeSettle)
	defer settle.Stop()
	subscribed := false
	subscribe := func() {
		if !subscribed {
			subscribed = true
			if connected != nil {
				connected()
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-settle.C:
			subscribe()
		case r := <-events:
			if r.err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if errors.Is(r.err, io.EOF) && !subscribed {
					return fmt.Errorf("container events: the runtime ended the stream at once, without an event (CRI-O does with enable_pod_events = false): %w", ErrUnsupported)
				}
				return classifyStreamError(r.err)
			}
			subscribe()
			handle(r.ev)
		}
	}
}

// sharedEventQueue says why the runtime's container event stream is not to
// be subscribed, "" when it may be: containerd before 2.0 and CRI-O before
// 1.28 hand each event to one of their subscribers only (they all read one
// queue; containerd issue 7318, fixed in 2.0; cri-o issue 6466, fixed in
// 1.28), so a subscription would take events from the kubelet's evented
// PLEG, and miss those the kubelet takes. A version that does not parse is
// taken as a later one.
func sharedEventQueue(v *runtimeapi.VersionResponse) string {
	var fixed [2]int
	switch v.GetRuntimeName() {
	case "containerd":
		fixed = [2]int{2, 0}
	case "cri-o":
		fixed = [2]int{1, 28}
	default:
		return ""
	}
	version, ok := majorMinor(v.GetRuntimeVersion())
	if !ok || version[0] > fixed[0] || version[0] == fixed[0] && version[1] >= fixed[1] {
		return ""
	}
	return fmt.Sprintf("%s %s hands each container event to one of its subscribers only (all read one queue, until %s %d.%d), "+
		"so nodegc would take events from the kubelet; listing containers instead", v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeName(), fixed[0], fixed[1])
}

// majorMinor reads the major and minor numbers of a runtime version
// ("v1.7.29", "1.27.4", "1.7.20~ds1"); a version of the major number alone
// has minor 0.
func majorMinor(version string) ([2]int, bool) {
	major, rest, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	if minor == "" {
		minor = "0"
	}
	maj, err1 := strconv.Atoi(major)
	mnr, err2 := strconv.Atoi(strings.TrimRightFunc(minor, func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{maj, mnr}, true
}

func classifyStreamError(err error) error {
	switch {
	case status.Code(err) == codes.Unimplemented:
		return fmt.Errorf("container events: %w", ErrUnsupported)
	case errors.Is(err, io.EOF):
		return errors.New("container events: the runtime closed the stream")
	default:
		return fmt.Errorf("container events: %w", err)
	}
}
