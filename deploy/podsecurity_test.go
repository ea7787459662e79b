package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
)

// TestChartPodSecurityNamespace installs the chart against a real
// kube-apiserver (helm install --dry-run=server, which reads the cluster
// as an install does): into a namespace whose pod-security.kubernetes.io/
// enforce label is stricter than privileged the install fails, naming the
// level and the command that fixes it, since Pod Security Admission would
// refuse every node agent pod while helm install reported success. The
// README's namespace command makes a namespace the chart installs into,
// and a namespace without the label (the cluster's default level, which
// the chart cannot read) is installed into, the notes saying what to
// check.
func TestChartPodSecurityNamespace(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx := t.Context()
	bin := filepath.Dir(testbed.Binary(t, "helm"))
	testbed.Binary(t, "kubectl")
	env := append(helmEnv(t), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+c.KubeconfigPath())
	run := func(t *testing.T, cmd string) (string, error) {
		t.Helper()
		root, err := testbed.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		sh := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", cmd)
		sh.Dir, sh.Env = root, env
		out, err := sh.CombinedOutput()
		return string(out), err
	}

	// The README's command, as it is there, for the namespace nodegc.
	readme := repoFile(t, "README.md")
	var nsCmd string
	for _, cmd := range readmeCommands(t, readme, "### Install with Helm") {
		if strings.HasPrefix(cmd, "kubectl create namespace nodegc ") {
			nsCmd = cmd
			break
		}
	}
	if nsCmd == "" {
		t.Fatal("README.md, Install with Helm, shows no kubectl create namespace nodegc")
	}
	for range 2 { // idempotent
		if out, err := run(t, nsCmd); err != nil {
			t.Fatalf("%s: %v\n%s", nsCmd, err, out)
		}
	}
	for name, level := range map[string]string{"psa-baseline": "baseline", "psa-restricted": "restricted", "psa-none": ""} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if level != "" {
			ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": level}
		}
		if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	install := func(t *testing.T, ns string) (string, error) {
		t.Helper()
		return run(t, "helm install nodegc deploy/"+chart+" --dry-run=server -n "+ns)
	}

	t.Run("README's namespace", func(t *testing.T) {
		out, err := install(t, "nodegc")
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		if strings.Contains(out, "has no pod-security.kubernetes.io/enforce label") {
			t.Errorf("the notes say the labelled namespace has no label:\n%s", out)
		}
	})
	for ns, level := range map[string]string{"psa-baseline": "baseline", "psa-restricted": "restricted"} {
		t.Run(ns, func(t *testing.T) {
			out, err := install(t, ns)
			if err == nil {
				t.Fatalf("helm install into a namespace enforcing %s succeeded:\n%s", level, out)
			}
			for _, want := range []string{"namespace " + ns, `"` + level + `"`, "kubectl label namespace " + ns + " pod-security.kubernetes.io/enforce=privileged --overwrite"} {
				if !strings.Contains(out, want) {
					t.Errorf("error does not say %q:\n%s", want, out)
				}
			}
		})
	}
	t.Run("no label", func(t *testing.T) {
		out, err := install(t, "psa-none")
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		for _, want := range []string{"has no pod-security.kubernetes.io/enforce label", "kubectl label namespace psa-none pod-security.kubernetes.io/enforce=privileged"} {
			if !strings.Contains(out, want) {
				t.Errorf("the notes do not say %q:\n%s", want, out)
			}
		}
	})
}
