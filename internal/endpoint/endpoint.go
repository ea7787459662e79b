// Package endpoint parses the endpoints of CRI runtimes: unix:// URLs
// naming an absolute socket path, the only transport CRI runtimes serve on
// Linux. The configuration validates endpoints with it and the CRI client
// and the agent dial and mount what it returns, so that all three read an
// endpoint the same way.
package endpoint

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Example is an endpoint as operators write it (containerd's default).
const Example = "unix:///run/containerd/containerd.sock"

// SocketPath returns the filesystem path of a unix:// endpoint, or an error
// that says what a valid endpoint looks like.
func SocketPath(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return "", fmt.Errorf("must be a unix:// URL, such as %s", Example)
	}
	if !filepath.IsAbs(rest) {
		return "", fmt.Errorf("must name an absolute socket path after unix://, such as %s", Example)
	}
	return rest, nil
}
