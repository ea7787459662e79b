package endpoint

import "testing"

func TestSocketPath(t *testing.T) {
	for name, tc := range map[string]struct {
		endpoint, path string
		ok             bool
	}{
		"containerd":        {endpoint: "unix:///run/containerd/containerd.sock", path: "/run/containerd/containerd.sock", ok: true},
		"cri-o":             {endpoint: "unix:///var/run/crio/crio.sock", path: "/var/run/crio/crio.sock", ok: true},
		"no scheme":         {endpoint: "/run/containerd/containerd.sock"},
		"tcp":               {endpoint: "tcp://127.0.0.1:1234"},
		"relative path":     {endpoint: "unix://run/containerd/containerd.sock"},
		"empty":             {endpoint: ""},
		"scheme only":       {endpoint: "unix://"},
		"npipe (Windows)":   {endpoint: "npipe:////./pipe/containerd-containerd"},
		"upper-case scheme": {endpoint: "UNIX:///run/containerd/containerd.sock"},
		"root socket (odd)": {endpoint: "unix:///", path: "/", ok: true},
	} {
		t.Run(name, func(t *testing.T) {
			path, err := SocketPath(tc.endpoint)
			if (err == nil) != tc.ok || path != tc.path {
				t.Errorf("SocketPath(%q) = %q, %v; want %q, ok %v", tc.endpoint, path, err, tc.path, tc.ok)
			}
		})
	}
}
