// Command nodegc is the node-level garbage-collection agent for Kubernetes:
// image and dead-container GC through CRI on every node, and the cluster's
// ownerReference garbage collector in one elected instance.
package main

import (
	"os"

	"github.com/nodegc/nodegc/cmd/nodegc/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
