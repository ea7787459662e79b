package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"github.com/nodegc/nodegc/internal/testbed"
)

// configParams fills the containerd config templates.
type configParams struct {
	Dir, Root, State, Socket, RuncRoot, Runc, CNIConf, Opt string
	SandboxImage, Snapshotter                              string
	// GCPauseThreshold is the GC scheduler's pause_threshold.
	GCPauseThreshold string
	// ProxySnapshotters are Options.ProxySnapshotters.
	ProxySnapshotters map[string]string
}

// gcPauseThreshold is containerd's default pause_threshold, or with rare
// set the one of Options.RareGC.
func gcPauseThreshold(rare bool) string {
	if rare {
		return "0.0000001"
	}
	return "0.02"
}

// config2 is containerd 2.x's config (version 3), as checked on these
// machines (restrict_oom_score_adj is required without CAP_SYS_RESOURCE).
var config2 = template.Must(template.New("containerd2").Parse(`version = 3
root = "{{.Root}}"
state = "{{.State}}"
imports = []
[grpc]
  address = "{{.Socket}}"
[ttrpc]
  address = "{{.Socket}}.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "{{.Snapshotter}}"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{{.SandboxImage}}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{{.Runc}}"
        Root = "{{.RuncRoot}}"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{{.CNIConf}}"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Opt}}"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.gc.v1.scheduler"]
  pause_threshold = {{.GCPauseThreshold}}
{{- range $name, $address := .ProxySnapshotters}}
[proxy_plugins.{{$name}}]
  type = "snapshot"
  address = "{{$address}}"
{{- end}}
`))

// config16 is containerd 1.6's config (version 2): the same settings under
// the io.containerd.grpc.v1.cri plugin.
var config16 = template.Must(template.New("containerd16").Parse(`version = 2
root = "{{.Root}}"
state = "{{.State}}"
imports = []
[grpc]
  address = "{{.Socket}}"
[ttrpc]
  address = "{{.Socket}}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.SandboxImage}}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "{{.Snapshotter}}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{{.Runc}}"
        Root = "{{.RuncRoot}}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{{.CNIConf}}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Opt}}"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.gc.v1.scheduler"]
  pause_threshold = {{.GCPauseThreshold}}
{{- range $name, $address := .ProxySnapshotters}}
[proxy_plugins.{{$name}}]
  type = "snapshot"
  address = "{{$address}}"
{{- end}}
`))

// loopbackCNI is a loopback-only CNI network: enough for containerd to
// report NetworkReady, and never used by host-network pods.
const loopbackCNI = `{"cniVersion": "1.0.0", "name": "lo-only", "plugins": [{"type": "loopback"}]}
`

// writeConfig writes DIR/config.toml and the CNI config for version v.
func writeConfig(v testbed.ContainerdVersion, p configParams) (string, error) {
	tmpl := config2
	if v == testbed.Containerd16 {
		tmpl = config16
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		return "", fmt.Errorf("render containerd %s config: %w", v, err)
	}
	path := filepath.Join(p.Dir, "config.toml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write containerd config: %w", err)
	}
	if err := os.MkdirAll(p.CNIConf, 0o755); err != nil {
		return "", fmt.Errorf("create CNI conf dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p.CNIConf, "10-lo-only.conflist"), []byte(loopbackCNI), 0o644); err != nil {
		return "", fmt.Errorf("write CNI config: %w", err)
	}
	return path, nil
}
