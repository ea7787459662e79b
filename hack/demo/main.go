// Command demo is `make demo`: nodegc against a throw-away node and control
// plane, end to end, in a few minutes.
//
// It starts a real etcd + kube-apiserver and a real containerd 2.x whose
// image filesystem is a small loop-mounted ext4 (the test-bed harnesses of
// internal/testbed), fills that filesystem with a few dozen images, runs a
// workload (running pods, a crash-looping container, a finished pod that
// gets deleted, a Deployment → ReplicaSet → Pods chain), shows `nodegc
// plan`, runs `nodegc run --owner-gc=auto` against it all, deletes the
// Deployment, and reports what nodegc removed and kept and why. It checks
// that nothing ineligible was removed and exits 0 only if every check
// holds. Everything is torn down at the end; with DEMO_KEEP=1 it stays up
// (nodegc included) until Ctrl-C.
//
// It needs root (containerd, a loop mount, cgroups) and the binaries of
// `make build` and `make tools`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodegc/nodegc/internal/testbed"
)

// nodeName is the demo node's name, in the API and in nodegc's config.
const nodeName = "demo-node"

func main() {
	nodegc := flag.String("nodegc", "", "the nodegc binary (default: _output/bin/nodegc of the repository, built by `make build`)")
	fsKind := flag.String("small-fs-kind", "", `"tmpfs" to put the image filesystem on tmpfs, as the test bed does when loop devices are unavailable; default loop-mounted ext4`)
	flag.Parse()

	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "[demo] the demo needs root: it runs containerd, loop-mounts a small ext4 filesystem and creates cgroups.\n[demo] Run it as root: sudo make demo")
		os.Exit(1)
	}
	root, err := testbed.RepoRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "[demo] %v: run the demo from the nodegc repository (make demo)\n", err)
		os.Exit(1)
	}
	if *nodegc == "" {
		*nodegc = filepath.Join(root, "_output", "bin", "nodegc")
	}
	if st, err := os.Stat(*nodegc); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		fmt.Fprintf(os.Stderr, "[demo] nodegc binary not found at %s: run `make build` (or `make demo`, which builds it)\n", *nodegc)
		os.Exit(1)
	}
	d := &demo{root: root, nodegcBin: *nodegc, keep: os.Getenv("DEMO_KEEP") == "1", fsKind: *fsKind}
	os.Exit(newTB().run(d.run))
}
