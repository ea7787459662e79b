package node

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// instance names the resources of one node, all derived from its
// directory, so that a sweep needs nothing but the directory's path.
type instance struct{ dir string }

func (i instance) socket() string   { return filepath.Join(i.dir, "c.sock") }
func (i instance) runcRoot() string { return filepath.Join(i.dir, "runc") }
func (i instance) taskDir() string {
	return filepath.Join(i.dir, "state", "io.containerd.runtime.v2.task")
}
func (i instance) cgroupParent() string { return "/" + filepath.Base(i.dir) }
func (i instance) configPath() string   { return filepath.Join(i.dir, "config.toml") }

// shimSocketDir is where both containerd versions' runc shims put their
// sockets by default.
const shimSocketDir = "/run/containerd/s"

// shimSocket is the socket path a shim computes from containerd's address,
// its namespace and its id (shim.SocketAddress in containerd 1.6 and 2.x).
func shimSocket(address, ns, id string, debug bool) string {
	p := filepath.Join(address, ns, id)
	if debug {
		p = filepath.Join(p, "debug")
	}
	return fmt.Sprintf("%s/%x", shimSocketDir, sha256.Sum256([]byte(p)))
}

// knownShimSockets lists the sockets of the shims that served tasks of
// this instance: from each bundle's "address" file, and computed from the
// bundle's namespace and id.
func (i instance) knownShimSockets() []string {
	var out []string
	nsDirs, _ := os.ReadDir(i.taskDir())
	for _, ns := range nsDirs {
		bundles, _ := os.ReadDir(filepath.Join(i.taskDir(), ns.Name()))
		for _, b := range bundles {
			if data, err := os.ReadFile(filepath.Join(i.taskDir(), ns.Name(), b.Name(), "address")); err == nil {
				addr := strings.TrimPrefix(strings.TrimSpace(string(data)), "unix://")
				if within(addr, shimSocketDir) || within(addr, i.dir) {
					out = append(out, addr)
				}
			}
			out = append(out, shimSocket(i.socket(), ns.Name(), b.Name(), false), shimSocket(i.socket(), ns.Name(), b.Name(), true))
		}
	}
	return out
}
