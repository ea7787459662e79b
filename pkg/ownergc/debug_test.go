package ownergc

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// debugTestGraph is a Deployment's family plus the odd cases the dump must
// show: a virtual owner, a deleted owner still referenced, an owner deleting
// its dependents, and an isolated object (left out of the full graph).
func debugTestGraph(t *testing.T) *Collector {
	resDeployment := newResource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", true)
	tg := newTestGraph(t)
	tg.apply(
		upsert(resDeployment, object("web", "frontend", "deploy-1")),
		upsert(resReplicaSet, object("web", "frontend-5d8", "rs-1", func(o *metav1.PartialObjectMetadata) {
			ownedBy(resDeployment, "frontend", "deploy-1", true)(o)
			o.OwnerReferences[0].Controller = new(true)
		})),
		upsert(resPod, object("web", "frontend-5d8-a", "pod-a", ownedBy(resReplicaSet, "frontend-5d8", "rs-1", true))),
		upsert(resPod, object("web", "frontend-5d8-b", "pod-b", ownedBy(resReplicaSet, "frontend-5d8", "rs-1", true))),
		upsert(resConfigMap, object("web", "settings", "cm-1", ownedBy(resConfigMap, "made-up", "ghost-1", false))),
		upsert(resConfigMap, object("web", "old", "cm-old")),
		upsert(resConfigMap, object("web", "leftover", "cm-2", ownedBy(resConfigMap, "old", "cm-old", false))),
		del(resConfigMap, object("web", "old", "cm-old")),
		upsert(resConfigMap, object("web", "parent", "cm-p", deleting(), withFinalizers(metav1.FinalizerDeleteDependents))),
		upsert(resConfigMap, object("web", "child", "cm-c", ownedBy(resConfigMap, "parent", "cm-p", true))),
		upsert(resNode, object("", "node-1", "node-1")),
	)
	c := &Collector{}
	c.current.Store(&run{graph: tg.g})
	return c
}

func TestDebugHandlerGolden(t *testing.T) {
	tests := map[string]struct {
		url    string
		accept string
		noRun  bool
		golden string
	}{
		"full graph as DOT":          {url: DebugGraphPath, golden: "full.dot"},
		"full graph as JSON":         {url: DebugGraphPath + "?format=json", golden: "full.json"},
		"JSON by Accept header":      {url: DebugGraphPath, accept: "text/html, application/json;q=0.9", golden: "full.json"},
		"subgraph of one pod":        {url: DebugGraphPath + "?uid=pod-a", golden: "subgraph-pod.dot"},
		"subgraphs of two objects":   {url: DebugGraphPath + "?uid=cm-1&uid=cm-c", golden: "subgraph-two.dot"},
		"unknown uid: empty graph":   {url: DebugGraphPath + "?uid=nope", golden: "empty.dot"},
		"collector not running":      {url: DebugGraphPath, noRun: true, golden: "empty.dot"},
		"subgraph as JSON":           {url: DebugGraphPath + "?uid=cm-2&format=json", golden: "subgraph-deleted.json"},
		"isolated object by its uid": {url: DebugGraphPath + "?uid=node-1", golden: "isolated.dot"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := &Collector{}
			if !tc.noRun {
				c = debugTestGraph(t)
			}
			req := httptest.NewRequest(http.MethodGet, tc.url, nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			rec := httptest.NewRecorder()
			c.DebugHandler().ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, rec.Body.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden file (run with -update to create it): %v", err)
			}
			if diff := cmp.Diff(string(want), rec.Body.String()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", path, diff)
			}
		})
	}
}

func TestDebugHandlerPath(t *testing.T) {
	rec := httptest.NewRecorder()
	debugTestGraph(t).DebugHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/other", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("status %d for another path, want 404", rec.Code)
	}
}
