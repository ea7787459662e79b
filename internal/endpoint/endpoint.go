// Package endpoint parses the endpoints of CRI runtimes: unix socket paths,
// the only transport CRI runtimes serve on Linux, read as the kubelet reads
// them (k8s.io/cri-client's GetAddressAndDialer: url.Parse, and a string
// without a scheme taken as a path after unix://). The configuration
// validates endpoints with it and the CRI client and the agent dial and
// mount what it returns, so that all three, and the kubelet, read an
// endpoint the same way.
package endpoint

import (
	"fmt"
	"net/url"
	"path/filepath"
)

// Example is an endpoint as operators write it (containerd's default).
const Example = "unix:///run/containerd/containerd.sock"

// SocketPath returns the filesystem path of a unix socket endpoint, or an
// error that says what a valid endpoint looks like. It accepts what the
// kubelet accepts: unix:///path, unix:/path, a scheme in any case, escapes
// (%20), and a bare absolute path (a form the kubelet's client calls
// deprecated; Warning says so). It refuses what the kubelet would dial
// elsewhere than the endpoint seems to say: a host after unix:// (the
// kubelet reads unix://run/x.sock as the path /x.sock), or no absolute
// path.
func SocketPath(endpoint string) (string, error) {
	u, bare, err := parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("is not a URL (%v); write a unix:// URL, such as %s", err, Example)
	}
	switch {
	case u.Scheme != "unix":
		return "", fmt.Errorf("must be a unix:// URL, such as %s", Example)
	case u.Host != "" && bare:
		return "", fmt.Errorf("must be an absolute socket path or a unix:// URL, such as %s", Example)
	case u.Host != "":
		return "", fmt.Errorf("names the host %q: the kubelet would dial %q; write three slashes before an absolute socket path, such as %s", u.Host, u.Path, Example)
	case u.Opaque != "" || !filepath.IsAbs(u.Path):
		return "", fmt.Errorf("must name an absolute socket path after unix://, such as %s", Example)
	}
	return u.Path, nil
}

// Warning returns what to tell an operator about an endpoint SocketPath
// accepts in a deprecated form (a bare path), or "".
func Warning(endpoint string) string {
	if _, bare, err := parse(endpoint); err != nil || !bare {
		return ""
	}
	path, err := SocketPath(endpoint)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("a bare path, which the kubelet reads as unix://%s and its CRI client calls deprecated; write unix://%s", path, path)
}

// parse reads endpoint as cri-client's parseEndpointWithFallbackProtocol
// does: as a URL, and when that fails or has no scheme, as a path after
// unix:// (bare reports that).
func parse(endpoint string) (u *url.URL, bare bool, err error) {
	if u, err = url.Parse(endpoint); err == nil && u.Scheme != "" {
		return u, false, nil
	}
	u, err = url.Parse("unix://" + endpoint)
	return u, true, err
}
