// Command nodegc is the node-level garbage-collection agent for Kubernetes:
// image and dead-container GC through CRI on every node, and the cluster's
// ownerReference garbage collector in one elected instance.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodegc/nodegc/cmd/nodegc/app"
)

func main() {
	// SIGTERM (kubelet stopping the pod) and SIGINT end the context: the
	// agent stops taking work, cancels the runtime calls and API requests
	// in flight without waiting for them (the runtime may still complete a
	// cancelled removal; the next run finishes what is left), saves its
	// state, releases its lease and exits 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := app.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
