package endpoint

import (
	"strings"
	"testing"
)

// TestSocketPath: an endpoint means what the kubelet makes of it
// (k8s.io/cri-client's GetAddressAndDialer on Linux, which reads it with
// url.Parse and takes a string without a scheme as a unix:// path), and one
// the kubelet would dial somewhere else than it seems to say is refused.
func TestSocketPath(t *testing.T) {
	for name, tc := range map[string]struct {
		endpoint, path string
		ok             bool
		warns          bool
	}{
		"containerd":        {endpoint: "unix:///run/containerd/containerd.sock", path: "/run/containerd/containerd.sock", ok: true},
		"cri-o":             {endpoint: "unix:///var/run/crio/crio.sock", path: "/var/run/crio/crio.sock", ok: true},
		"no slashes":        {endpoint: "unix:/run/containerd/containerd.sock", path: "/run/containerd/containerd.sock", ok: true},
		"no scheme":         {endpoint: "/run/containerd/containerd.sock", path: "/run/containerd/containerd.sock", ok: true, warns: true},
		"upper-case scheme": {endpoint: "UNIX:///run/containerd/containerd.sock", path: "/run/containerd/containerd.sock", ok: true},
		"escaped":           {endpoint: "unix:///run/my%20runtime.sock", path: "/run/my runtime.sock", ok: true},
		"query (ignored)":   {endpoint: "unix:///run/containerd/containerd.sock?x=1", path: "/run/containerd/containerd.sock", ok: true},
		"root socket (odd)": {endpoint: "unix:///", path: "/", ok: true},
		"tcp":               {endpoint: "tcp://127.0.0.1:1234"},
		// The kubelet dials /containerd/containerd.sock ("run" is a host).
		"relative path":          {endpoint: "unix://run/containerd/containerd.sock"},
		"host":                   {endpoint: "unix://localhost/run/containerd/containerd.sock"},
		"opaque":                 {endpoint: "unix:run/containerd/containerd.sock"},
		"relative, no scheme":    {endpoint: "run/containerd/containerd.sock"},
		"empty":                  {endpoint: ""},
		"scheme only":            {endpoint: "unix://"},
		"npipe (Windows)":        {endpoint: "npipe:////./pipe/containerd-containerd"},
		"not a URL, no scheme":   {endpoint: "/run/%zz.sock"},
		"not a URL, with scheme": {endpoint: "unix:///run/%zz.sock"},
	} {
		t.Run(name, func(t *testing.T) {
			path, err := SocketPath(tc.endpoint)
			if (err == nil) != tc.ok || path != tc.path {
				t.Errorf("SocketPath(%q) = %q, %v; want %q, ok %v", tc.endpoint, path, err, tc.path, tc.ok)
			}
			w := Warning(tc.endpoint)
			if (w != "") != tc.warns {
				t.Errorf("Warning(%q) = %q, want a warning: %v", tc.endpoint, w, tc.warns)
			}
			if tc.warns && !strings.Contains(w, "unix://"+tc.path) {
				t.Errorf("Warning(%q) = %q, does not say how to write it (unix://%s)", tc.endpoint, w, tc.path)
			}
		})
	}
}
