package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/config"
)

// renderManifest runs hack/render-deploy.sh IMAGE with the node overrides
// in env (NODEGC_RUNTIME_SOCKET, ...) and returns its output and objects.
func renderManifest(t testing.TB, image string, env map[string]string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "render-deploy.sh"), image)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/render-deploy.sh %s: %v: %s", image, err, stderr.String())
	}
	return out, decodeObjects(t, out)
}

func decodeObjects(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := parseObjects(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// parseObjects reads the objects of a multi-document YAML manifest, empty
// documents skipped.
func parseObjects(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var objs []*unstructured.Unstructured
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(js)) == 0 || string(bytes.TrimSpace(js)) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(js); err != nil { // integers as int64, as the API machinery has them
			return nil, err
		}
		objs = append(objs, o)
	}
}

func findObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// TestRenderDeploy: hack/render-deploy.sh changes the image and nothing
// else; with node overrides, every path the agent uses is the same on the
// host, in the container and in the configuration, and the configuration
// still validates.
func TestRenderDeploy(t *testing.T) {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(root, "deploy", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const image = "registry.example:5000/nodegc:v1.2.3"

	t.Run("image only", func(t *testing.T) {
		out, _ := renderManifest(t, image, nil)
		want := strings.ReplaceAll(string(orig), "image: ghcr.io/nodegc/nodegc:latest", "image: "+image) + "\n"
		if diff := cmp.Diff(strings.TrimRight(want, "\n"), strings.TrimRight(string(out), "\n")); diff != "" {
			t.Errorf("render changed more than the image (-want +got):\n%s", diff)
		}
	})

	t.Run("node overrides", func(t *testing.T) {
		env := map[string]string{
			"NODEGC_RUNTIME_SOCKET":     "/tmp/ngc-10281/c.sock", // a default port inside a path stays
			"NODEGC_CONTAINERD_ROOT":    "/tmp/ngc-10281/root",
			"NODEGC_POD_LOGS_DIR":       "/tmp/ngc-10281/pods",
			"NODEGC_CONTAINER_LOGS_DIR": "/tmp/ngc-10281/containers",
			"NODEGC_STATE_DIR":          "/tmp/ngc-10281/state",
			"NODEGC_HEALTHZ_PORT":       "41280",
			"NODEGC_METRICS_PORT":       "41281",
		}
		_, objs := renderManifest(t, image, env)
		cm := findObject(objs, "ConfigMap", "nodegc-config")
		ds := findObject(objs, "DaemonSet", "nodegc-node")
		if cm == nil || ds == nil {
			t.Fatalf("rendered manifest lacks the ConfigMap or the DaemonSet")
		}
		data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
		loaded, err := config.Decode([]byte(data))
		if err != nil {
			t.Fatalf("rendered config: %v", err)
		}
		if errs := config.Validate(loaded.Config); len(errs) > 0 {
			t.Fatalf("rendered config: %v", errs)
		}
		c := loaded.Config
		gotConfig := map[string]string{
			"endpoint": c.ContainerRuntimeEndpoint, "state": c.StateDirectory,
			"podLogs": c.ContainerGC.PodLogsDirectory, "containerLogs": c.ContainerGC.ContainerLogsDirectory,
			"metrics": c.MetricsBindAddress, "healthz": c.HealthzBindAddress,
		}
		wantConfig := map[string]string{
			"endpoint": "unix:///tmp/ngc-10281/c.sock", "state": "/tmp/ngc-10281/state",
			"podLogs": "/tmp/ngc-10281/pods", "containerLogs": "/tmp/ngc-10281/containers",
			"metrics": ":41281", "healthz": ":41280",
		}
		if diff := cmp.Diff(wantConfig, gotConfig); diff != "" {
			t.Errorf("rendered config (-want +got):\n%s", diff)
		}

		// Volumes: host path == mount path for every hostPath volume.
		spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
		hostPaths := map[string]string{}
		vols, _, _ := unstructured.NestedSlice(spec, "volumes")
		for _, v := range vols {
			if p, ok, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path"); ok {
				hostPaths[v.(map[string]any)["name"].(string)] = p
			}
		}
		ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
		mounts := map[string]string{}
		mountList, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "volumeMounts")
		for _, m := range mountList {
			mm := m.(map[string]any)
			if _, ok := hostPaths[mm["name"].(string)]; ok {
				mounts[mm["name"].(string)] = mm["mountPath"].(string)
			}
		}
		wantPaths := map[string]string{
			"runtime-dir": "/tmp/ngc-10281", "containerd-root": "/tmp/ngc-10281/root",
			"state": "/tmp/ngc-10281/state", "pod-logs": "/tmp/ngc-10281/pods", "container-logs": "/tmp/ngc-10281/containers",
		}
		if diff := cmp.Diff(wantPaths, hostPaths); diff != "" {
			t.Errorf("hostPath volumes (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantPaths, mounts); diff != "" {
			t.Errorf("mount paths (-want +got):\n%s", diff)
		}
		ports, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "ports")
		gotPorts := map[string]int64{}
		for _, p := range ports {
			pm := p.(map[string]any)
			gotPorts[pm["name"].(string)] = pm["containerPort"].(int64)
		}
		if diff := cmp.Diff(map[string]int64{"healthz": 41280, "metrics": 41281}, gotPorts); diff != "" {
			t.Errorf("container ports (-want +got):\n%s", diff)
		}
	})

	// The socket's directory is what is mounted: it follows the socket, and
	// no replaced value is matched again by another default (a socket under
	// /var/run/containerd holds the default directory /run/containerd).
	t.Run("socket directory", func(t *testing.T) {
		for name, tc := range map[string]struct{ socket, dir string }{
			"k3s":                {"/run/k3s/containerd/containerd.sock", "/run/k3s/containerd"},
			"under /var/run":     {"/var/run/containerd/containerd.sock", "/var/run/containerd"},
			"same directory":     {"/run/containerd/other.sock", "/run/containerd"},
			"default socket dir": {"/run/containerd/containerd.sock", "/run/containerd"},
		} {
			t.Run(name, func(t *testing.T) {
				_, objs := renderManifest(t, image, map[string]string{"NODEGC_RUNTIME_SOCKET": tc.socket})
				cm := findObject(objs, "ConfigMap", "nodegc-config")
				ds := findObject(objs, "DaemonSet", "nodegc-node")
				data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
				loaded, err := config.Decode([]byte(data))
				if err != nil {
					t.Fatal(err)
				}
				spec, _, _ := unstructured.NestedMap(ds.Object, "spec", "template", "spec")
				var hostPath, hostType, mountPath string
				vols, _, _ := unstructured.NestedSlice(spec, "volumes")
				for _, v := range vols {
					if v.(map[string]any)["name"] == "runtime-dir" {
						hostPath, _, _ = unstructured.NestedString(v.(map[string]any), "hostPath", "path")
						hostType, _, _ = unstructured.NestedString(v.(map[string]any), "hostPath", "type")
					}
				}
				ctrs, _, _ := unstructured.NestedSlice(spec, "containers")
				mounts, _, _ := unstructured.NestedSlice(ctrs[0].(map[string]any), "volumeMounts")
				for _, m := range mounts {
					if m.(map[string]any)["name"] == "runtime-dir" {
						mountPath = m.(map[string]any)["mountPath"].(string)
					}
				}
				got := map[string]string{"endpoint": loaded.Config.ContainerRuntimeEndpoint, "hostPath": hostPath, "type": hostType, "mountPath": mountPath}
				want := map[string]string{"endpoint": "unix://" + tc.socket, "hostPath": tc.dir, "type": "Directory", "mountPath": tc.dir}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("NODEGC_RUNTIME_SOCKET=%s (-want +got):\n%s", tc.socket, diff)
				}
			})
		}
	})

	// Directories beside one another, and one whose name only begins like
	// another's, render.
	t.Run("takes directories apart", func(t *testing.T) {
		renderManifest(t, "x.example/nodegc:1", map[string]string{"NODEGC_STATE_DIR": "/var/log/pods-nodegc", "NODEGC_POD_LOGS_DIR": "/var/log/pods"})
	})

	t.Run("refuses bad values", func(t *testing.T) {
		for name, env := range map[string][]string{
			"socket in /":   {"NODEGC_RUNTIME_SOCKET=/containerd.sock"},
			"relative path": {"NODEGC_STATE_DIR=var/lib/nodegc"},
			"port":          {"NODEGC_METRICS_PORT=70000"},
			"no image":      nil,
		} {
			args := []string{"x.example/nodegc:1"}
			if name == "no image" {
				args = nil
			}
			cmd := exec.Command(filepath.Join(root, "hack", "render-deploy.sh"), args...)
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("%s: want an error, got success:\n%.200s", name, out)
			}
		}
	})

	// Two node paths at one place would be two volumes mounted at one
	// path (the API server refuses the DaemonSet); two ports at one would
	// make the agent fail to bind. The error names both variables.
	t.Run("refuses coinciding values", func(t *testing.T) {
		for name, tc := range map[string]struct {
			env  []string
			want []string
		}{
			"state in the pod logs":   {[]string{"NODEGC_STATE_DIR=/var/log/pods"}, []string{"NODEGC_STATE_DIR", "NODEGC_POD_LOGS_DIR", "/var/log/pods"}},
			"state at the config":     {[]string{"NODEGC_STATE_DIR=/etc/nodegc"}, []string{"NODEGC_STATE_DIR", "configuration", "/etc/nodegc"}},
			"two paths set alike":     {[]string{"NODEGC_POD_LOGS_DIR=/data/logs", "NODEGC_CONTAINER_LOGS_DIR=/data/logs"}, []string{"NODEGC_POD_LOGS_DIR", "NODEGC_CONTAINER_LOGS_DIR"}},
			"socket dir is the root":  {[]string{"NODEGC_RUNTIME_SOCKET=/var/lib/containerd/containerd.sock"}, []string{"NODEGC_RUNTIME_SOCKET", "NODEGC_CONTAINERD_ROOT"}},
			"metrics on healthz port": {[]string{"NODEGC_METRICS_PORT=10280"}, []string{"NODEGC_METRICS_PORT", "NODEGC_HEALTHZ_PORT", "10280"}},
			// Nested: the agent refuses a state or log directory in another
			// (pkg/config validateDirectoriesApart), as the chart does.
			"state under the pod logs": {[]string{"NODEGC_STATE_DIR=/var/log/pods/nodegc"}, []string{"NODEGC_STATE_DIR", "/var/log/pods/nodegc", "NODEGC_POD_LOGS_DIR", "/var/log/pods", "lies in"}},
			"pod logs hold the links":  {[]string{"NODEGC_POD_LOGS_DIR=/var/log"}, []string{"NODEGC_CONTAINER_LOGS_DIR", "/var/log/containers", "NODEGC_POD_LOGS_DIR", "lies in"}},
			"links under the state":    {[]string{"NODEGC_STATE_DIR=/data/nodegc", "NODEGC_CONTAINER_LOGS_DIR=/data/nodegc/containers"}, []string{"NODEGC_CONTAINER_LOGS_DIR", "NODEGC_STATE_DIR", "lies in"}},
		} {
			cmd := exec.Command(filepath.Join(root, "hack", "render-deploy.sh"), "x.example/nodegc:1")
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Errorf("%s: want an error, got success:\n%.200s", name, out)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("%s: the error does not name %s: %s", name, w, out)
				}
			}
		}
	})
}
