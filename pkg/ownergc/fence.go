package ownergc

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrLeaseLost is the error of a write request the collector refused to
// send because Options.MayWrite said no: this instance no longer holds
// the lease (or cannot be sure it does).
var ErrLeaseLost = errors.New("ownergc: write refused: this instance no longer holds the lease")

// fence returns a transport wrapper that asks mayWrite immediately before
// every write request (anything but GET, HEAD and OPTIONS: list and watch
// are GETs) and fails the request without sending it when mayWrite says
// no. Asking in the transport, rather than in the workers, also covers a
// process that was frozen (SIGSTOP, a long GC pause, a suspended VM): a
// worker resumes wherever it was, possibly just before a request, ahead
// of any goroutine that could cancel it, but the request still passes
// here.
func fence(mayWrite func() bool) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return &fenceTransport{next: rt, mayWrite: mayWrite}
	}
}

type fenceTransport struct {
	next     http.RoundTripper
	mayWrite func() bool
}

func (t *fenceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if !t.mayWrite() {
			if req.Body != nil {
				req.Body.Close() // a RoundTripper closes the body, also on errors
			}
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, ErrLeaseLost)
		}
	}
	return t.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go reach the transport underneath
// (utilnet.RoundTripperWrapper).
func (t *fenceTransport) WrappedRoundTripper() http.RoundTripper { return t.next }
