package main

import (
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// TestDemo runs the whole demo, as `make demo` does, with the nodegc the
// agent tests build: every check of its report must hold. The demo is
// what a reader of the README runs first; before this test, a change to
// the pod view's trust (the Node must report this machine's boot ID)
// left its Node without one, and nodegc, rightly, freed nothing, unseen by
// `make test`.
func TestDemo(t *testing.T) {
	testbed.RequireRoot(t)
	bin, err := nodegcproc.Build()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	d := &demo{root: root, nodegcBin: bin}
	if code := newTB().run(d.run); code != 0 {
		t.Fatalf("the demo failed (exit code %d): its output says which step or check", code)
	}
}
