// Command nodegc is the node-level garbage-collection agent for Kubernetes:
// image and dead-container GC through CRI on every node, and the cluster's
// ownerReference garbage collector in one elected instance.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/cmd/nodegc/app"
)

func main() {
	// SIGTERM (kubelet stopping the pod), SIGINT and SIGHUP end the
	// context: the agent stops taking work, cancels the runtime calls and
	// API requests in flight without waiting for them (the runtime may
	// still complete a cancelled removal; the next run finishes what is
	// left), saves its state, releases its lease and exits 0. SIGHUP is
	// no reload (a habit of daemons, or the hangup of the terminal that ran
	// `nodegc run`): without a handler it would end the process at once,
	// with no shutdown and the lease left to expire.
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	stopOn := []os.Signal{syscall.SIGTERM, os.Interrupt}
	if !signal.Ignored(syscall.SIGHUP) {
		// Under nohup SIGHUP is ignored, and asking for it would turn it
		// back on: nodegc would end at the hangup nohup is for.
		stopOn = append(stopOn, syscall.SIGHUP)
	}
	signal.Notify(signals, stopOn...)
	go func() {
		if sig := <-signals; sig == syscall.SIGHUP {
			klog.InfoS("SIGHUP received: shutting down as on SIGTERM; nodegc does not reload its configuration: "+
				"a changed configuration needs a restart", "signal", sig.String())
		}
		cancel()
	}()
	code := app.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	signal.Stop(signals)
	cancel()
	os.Exit(code)
}
