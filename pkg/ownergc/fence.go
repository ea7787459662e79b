package ownergc

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ErrLeaseLost is the error of a write request the collector refused to
// send because Options.WriteWindow said no time was left: this instance no
// longer holds the lease (or cannot be sure it does).
var ErrLeaseLost = errors.New("ownergc: write refused: this instance no longer holds the lease")

// fence returns a transport wrapper that asks window immediately before
// every write request (anything but GET, HEAD and OPTIONS: list and watch
// are GETs) and fails the request without sending it when less than
// minWriteWindow is left. Asking in the transport, rather than in the
// workers, also covers a process that was frozen (SIGSTOP, a long GC
// pause, a suspended VM): a
// worker resumes wherever it was, possibly just before a request, ahead
// of any goroutine that could cancel it, but the request still passes
// here.
func fence(window func() time.Duration) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &fenceTransport{next: rt, window: window}
	}
}

// minWriteWindow is the least time left of the write window with which a
// write is sent: with less, its server-side timeout would mostly answer 504
// (an action error), and renewals have failed for most of renewDeadline.
const minWriteWindow = time.Second

type fenceTransport struct {
	next   http.RoundTripper
	window func() time.Duration
}

func (t *fenceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		left := t.window()
		if left < minWriteWindow {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, also on errors
			}
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrLeaseLost)
		}
		req = withServerTimeout(req, left)
	}
	return t.next.RoundTrip(req)
}

// withServerTimeout returns req asking kube-apiserver to give the request
// up after at most d (the timeout parameter, which bounds its work on the
// request: a write still waiting in a Priority and Fairness queue or on an
// admission webhook when the write window closes is dropped, not run
// later). A shorter timeout of the request's own is kept. The server
// counts from when it receives the request; leaseDuration - renewDeadline
// (5s by default) is what covers the way there. req itself is not
// changed (a RoundTripper must not).
func withServerTimeout(req *http.Request, d time.Duration) *http.Request {
	q := req.URL.Query()
	if own, err := time.ParseDuration(q.Get("timeout")); err == nil && own > 0 && own <= d {
		return req
	}
	req = req.Clone(req.Context())
	q.Set("timeout", d.String())
	req.URL.RawQuery = q.Encode()
	return req
}

// WrappedRoundTripper lets client-go reach the transport underneath
// (utilnet.RoundTripperWrapper).
func (t *fenceTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
