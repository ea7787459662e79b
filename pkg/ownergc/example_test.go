package ownergc_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/pkg/config"
	"github.com/nodegc/nodegc/pkg/ownergc"
)

// A program that embeds the owner GC builds it from the defaulted ownerGC
// section (New checks it with the configuration's own rules and does no
// I/O), runs it where it holds the lease, and may serve its graph.
func Example() {
	cfg := config.Defaulted().OwnerGC
	cfg.DryRun = true // decide and record, write nothing
	rc := &rest.Config{Host: "https://127.0.0.1:6443"}
	gc, err := ownergc.New(ownergc.Options{Config: cfg, RESTConfig: rc, Registerer: prometheus.NewRegistry()})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The elected instance calls gc.Run(ctx); until its caches are synced
	// it deletes nothing and says so.
	fmt.Println("synced before Run:", gc.HasSynced())
	srv := httptest.NewServer(gc.DebugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + ownergc.DebugGraphPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		fmt.Println(err)
		return
	}
	// Not running yet: an empty graph, in Graphviz's DOT.
	fmt.Println("GET", ownergc.DebugGraphPath+":", resp.Status, resp.Header.Get("Content-Type"))
	fmt.Print(string(body))

	bad := cfg
	bad.ConcurrentGCSyncs = 0
	_, err = ownergc.New(ownergc.Options{Config: bad, RESTConfig: rc})
	fmt.Println(err)
	// Output:
	// synced before Run: false
	// GET /debug/controllers/garbagecollector/graph: 200 OK text/vnd.graphviz
	// strict digraph full {
	// }
	// ownergc: ownerGC.concurrentGCSyncs: Invalid value: 0: must be greater than 0
}
