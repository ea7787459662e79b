package agent

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// runnable is one long-running part of the agent (the node GC, the owner
// GC): controller-runtime's Runnable idea, without the dependency. run
// blocks until its context ends and then returns promptly; anything it must
// do on the way out (save state, release a lease) it does before returning.
type runnable struct {
	name string
	run  func(context.Context)
}

// runnables runs a set of runnables under one context of their own, which
// ends when stop is called, not when the caller's context does: the agent
// first marks its watchdog as shutting down, then stops the work.
type runnables struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startAll starts every runnable of rs, each under a logger of its name.
func startAll(ctx context.Context, rs []runnable) *runnables {
	g := &runnables{}
	g.ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, r := range rs {
		g.wg.Go(func() { r.run(withLoggerName(g.ctx, r.name)) })
	}
	return g
}

// stop ends the runnables' context and waits for them to return, at most
// grace (no limit if grace is 0). It says whether they all returned.
func (g *runnables) stop(grace time.Duration) bool {
	g.cancel()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	if grace <= 0 {
		<-done
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(grace):
		return false
	}
}

// withLoggerName gives the work run under ctx a logger of its own name, so
// that its log lines say which part of the agent wrote them.
func withLoggerName(ctx context.Context, name string) context.Context {
	return klog.NewContext(ctx, klog.LoggerWithName(klog.FromContext(ctx), name))
}
