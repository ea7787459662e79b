package cri_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodegc/nodegc/pkg/cri"
)

// A program dials the runtime's socket once; every call is then bounded by
// Options.Timeout, and the client redials a restarted runtime by itself.
// A runtime that does not answer is an error the caller can classify.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sock := filepath.Join("/run", "nodegc-example-absent", "containerd.sock")
	c, err := cri.Dial(ctx, cri.Options{
		RuntimeEndpoint: "unix://" + sock,
		Timeout:         time.Second,
		Metrics:         cri.NewMetrics(prometheus.NewRegistry()),
	})
	if err != nil {
		fmt.Println("runtime unavailable:", cri.IsUnavailable(err))
		return
	}
	defer c.Close()
	images, err := c.ListImages(ctx)
	fmt.Println(len(images), err)
	// Output: runtime unavailable: true
}
