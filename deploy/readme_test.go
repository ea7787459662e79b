package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// readmeSections are the README sections whose commands this test runs.
var readmeSections = []string{"### Install with Helm", "### Distribution presets", "## Monitoring"}

// repoFile returns the file at path in the repository.
func repoFile(t *testing.T, path string) string {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// readmeSection returns the body of a README section: from its heading to
// the next heading of its level or above.
func readmeSection(t *testing.T, readme, heading string) string {
	t.Helper()
	start := strings.Index(readme, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("README.md has no section %q", heading)
	}
	body := readme[start+len(heading)+2:]
	level := strings.Fields(heading)[0]
	if end := regexp.MustCompile(`\n#{1,` + strconv.Itoa(len(level)) + `} `).FindStringIndex(body); end != nil {
		body = body[:end[0]]
	}
	return body
}

// readmeCommands returns the commands of the ```sh blocks of a README
// section, continuation lines joined.
func readmeCommands(t *testing.T, readme, heading string) []string {
	t.Helper()
	body := readmeSection(t, readme, heading)
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(body, -1) {
		cmd := ""
		for _, line := range strings.Split(block[1], "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			cmd += strings.TrimSpace(line)
			if strings.HasSuffix(cmd, `\`) {
				cmd = strings.TrimSuffix(cmd, `\`)
				continue
			}
			cmds = append(cmds, cmd)
			cmd = ""
		}
	}
	return cmds
}

// TestReadmeCommands runs the commands the README shows for Helm, the
// presets and monitoring, as far as a cluster is not needed: each `helm
// install` rendered with `helm template` (make e2e runs a real helm
// install), `helm lint` as it is, a pipeline into `kubectl apply [-n NS]
// -f -` without its last stage (a Namespace it makes must be labelled
// privileged, a PrometheusRule carry a release label), each file a
// `kubectl apply -f FILE` names decoded, and a pipeline into `nodegc config
// validate -f -` run whole, with nodegc built from this repository: it
// passes, and the same pipeline with a value only the agent refuses (an
// exclusion pattern's glob syntax, which the chart does not check) fails,
// naming it. A command of another shape fails the test, so the README
// shows nothing untested.
func TestReadmeCommands(t *testing.T) {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(testbed.Binary(t, "helm"))
	testbed.Binary(t, "kubectl")
	// No cluster: a command that would reach one fails.
	env := append(helmEnv(t), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"))
	exec1 := func(t *testing.T, cmd string, env []string) ([]byte, error) {
		t.Helper()
		c := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", cmd)
		c.Dir, c.Env = root, env
		var stderr bytes.Buffer
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			return out, fmt.Errorf("%s: %w\n%s", cmd, err, stderr.String())
		}
		return out, nil
	}
	run := func(t *testing.T, cmd string) []byte {
		t.Helper()
		out, err := exec1(t, cmd, env)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	applyFile := regexp.MustCompile(`^kubectl apply( -n [a-z0-9-]+)? -f ([^ |]+)$`)
	applyStdin := regexp.MustCompile(` ?\| ?kubectl apply( -n [a-z0-9-]+)? -f -$`)
	validateStdin := regexp.MustCompile(`^helm template .* --show-only templates/configmap.yaml \| (.* \| ?)?nodegc config validate -f -$`)
	seen := map[string]int{}
	for _, heading := range readmeSections {
		cmds := readmeCommands(t, string(data), heading)
		if len(cmds) == 0 {
			t.Errorf("README.md section %q shows no command", heading)
		}
		for _, cmd := range cmds {
			t.Run(cmd, func(t *testing.T) {
				switch {
				case strings.HasPrefix(cmd, "helm install "):
					seen["helm install"]++
					if strings.Contains(cmd, "--create-namespace") {
						t.Errorf("--create-namespace makes a namespace without the Pod Security label the node agent needs: make it first (README, Install with Helm)")
					}
					objs := decodeObjects(t, run(t, "helm template "+strings.TrimPrefix(cmd, "helm install ")))
					if find(objs, "DaemonSet", "nodegc-node") == nil {
						t.Errorf("renders no DaemonSet nodegc-node")
					}
					renderedConfig(t, objs)
				case strings.HasPrefix(cmd, "helm lint "):
					seen["helm lint"]++
					run(t, cmd)
				case applyStdin.MatchString(cmd):
					seen["pipeline"]++
					objs := decodeObjects(t, run(t, cmd[:applyStdin.FindStringIndex(cmd)[0]]))
					if len(objs) == 0 {
						t.Errorf("makes no object")
					}
					for _, o := range objs {
						switch o.GetKind() {
						case "Namespace":
							seen["namespace"]++
							if level := o.GetLabels()["pod-security.kubernetes.io/enforce"]; level != "privileged" {
								t.Errorf("Namespace %s: pod-security.kubernetes.io/enforce %q, want privileged (the node agent needs the host network, hostPath volumes, root)", o.GetName(), level)
							}
						case "PrometheusRule":
							seen["PrometheusRule"]++
							if o.GetLabels()["release"] == "" {
								t.Errorf("PrometheusRule %s has no release label: kube-prometheus-stack's ruleSelector would load it nowhere", o.GetName())
							}
						}
					}
				case validateStdin.MatchString(cmd):
					seen["config validate"]++
					nodegc, err := nodegcproc.Build()
					if err != nil {
						t.Fatal(err)
					}
					// With -race, nodegc is race-enabled: a data race fails it (RaceEnv).
					withNodegc := append(slices.Clone(env), nodegcproc.RaceEnv(), "PATH="+filepath.Dir(nodegc)+string(os.PathListSeparator)+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
					out, err := exec1(t, cmd, withNodegc)
					if err != nil || !strings.Contains(string(out), "valid") {
						t.Errorf("%v\n%s", err, out)
					}
					bad := strings.Replace(cmd, " --show-only ", " --set-string config.imageGC.exclude[0]=[abc --show-only ", 1)
					out, err = exec1(t, bad, withNodegc)
					if err == nil || !strings.Contains(err.Error()+string(out), "imageGC.exclude[0]") {
						t.Errorf("with an exclusion pattern the agent refuses, the pipeline says %v\n%s; want a failure naming imageGC.exclude[0]", err, out)
					} else if r := nodegcproc.RaceReport([]byte(err.Error())); r != "" {
						t.Errorf("nodegc config validate, refusing the pattern, reported a data race:\n%s", r)
					}
				case applyFile.MatchString(cmd):
					seen["apply"]++
					file := applyFile.FindStringSubmatch(cmd)[2]
					raw, err := os.ReadFile(filepath.Join(root, file))
					if err != nil {
						t.Fatal(err)
					}
					objs := decodeObjects(t, raw)
					if len(objs) == 0 {
						t.Fatalf("%s holds no object", file)
					}
					for _, o := range objs {
						if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
							t.Errorf("%s: an object without apiVersion, kind or name", file)
						}
					}
				default:
					t.Errorf("a command this test does not know how to run: keep the README to commands that are tested")
				}
			})
		}
	}
	// What the README must keep showing: installs (with every preset),
	// lint, the namespace, the dashboard's ConfigMap and the PrometheusRule
	// with the label kube-prometheus-stack selects.
	for _, p := range presets {
		if !strings.Contains(string(data), "-f deploy/helm/nodegc/presets/"+p+".yaml") {
			t.Errorf("README.md shows no install with the %s preset", p)
		}
	}
	for what, least := range map[string]int{"helm install": 1 + len(presets), "helm lint": 1, "pipeline": 2, "namespace": 1, "PrometheusRule": 1, "config validate": 1} {
		if seen[what] < least {
			t.Errorf("README.md shows %d %s command(s), want at least %d", seen[what], what, least)
		}
	}
}

// TestKubeControllerManagerGCDocumented: where an operator installs nodegc
// (README's Deploy and Install with Helm, the chart's ownerGC.mode, the
// plain manifest's header, the chart's notes after an install), the docs
// say that the owner GC modes need kube-controller-manager's garbage
// collector off, and that where it cannot be (managed control planes)
// ownerGC.mode off is the one to use: with both collectors on, nodegc's
// holds of orphan and foregroundDeletion finalizers do not apply.
func TestKubeControllerManagerGCDocumented(t *testing.T) {
	readme := repoFile(t, "README.md")
	values := repoFile(t, "deploy/helm/nodegc/values.yaml")
	modeDoc, _, _ := strings.Cut(values[strings.Index(values, "\n# Where the cluster's ownerReference garbage collector runs"):], "\nownerGC:")
	texts := map[string]string{
		"README.md, Deploy":            readmeSection(t, readme, "## Deploy"),
		"README.md, Install with Helm": readmeSection(t, readme, "### Install with Helm"),
		"values.yaml, ownerGC.mode":    modeDoc,
		"deploy/daemonset.yaml header": repoFile(t, "deploy/daemonset.yaml"),
		"NOTES.txt":                    repoFile(t, "deploy/helm/nodegc/templates/NOTES.txt"),
	}
	for where, text := range texts {
		text = strings.Join(strings.Fields(strings.ReplaceAll(text, "#", " ")), " ")
		for _, want := range []string{"--controllers=*,-garbagecollector", "mode off", "managed control plane"} {
			if !strings.Contains(strings.ReplaceAll(text, "mode=off", "mode off"), want) {
				t.Errorf("%s does not say %q", where, want)
			}
		}
	}
}

// TestOpenShiftUntested: nodegc is untested on OpenShift, and the chart
// grants no SecurityContextConstraint, so no preset and no README
// paragraph names OpenShift (or OKD) without saying it is untested, and
// README says what an operator would have to add: the privileged SCC's
// use by the node agent's ServiceAccount, ownerGC.mode off (its
// kube-controller-manager's collector stays on) and SELinux type spc_t.
func TestOpenShiftUntested(t *testing.T) {
	texts := map[string]string{}
	presetDir := filepath.Join(chart, "presets")
	entries, err := os.ReadDir(presetDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(presetDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		texts["presets/"+e.Name()] = string(data)
	}
	readme := repoFile(t, "README.md")
	for i, para := range strings.Split(readme, "\n\n") {
		texts[fmt.Sprintf("README.md paragraph %d", i+1)] = para
	}
	var guide string
	for where, text := range texts {
		lower := strings.ToLower(text)
		if !strings.Contains(lower, "openshift") && !strings.Contains(lower, "okd") {
			continue
		}
		if !strings.Contains(lower, "untested") {
			t.Errorf("%s names OpenShift without saying nodegc is untested there:\n%s", where, text)
		}
		if strings.HasPrefix(where, "README.md") && strings.Contains(text, "add-scc-to-user") {
			guide = strings.Join(strings.Fields(text), " ")
		}
	}
	for _, want := range []string{"oc adm policy add-scc-to-user privileged -z nodegc-node -n nodegc", "--set ownerGC.mode=off", "--set node.securityContext.seLinuxOptions.type=spc_t"} {
		if !strings.Contains(guide, want) {
			t.Errorf("README's OpenShift paragraph does not say %q:\n%s", want, guide)
		}
	}
}

// TestPlanInAgentPodDocumented: where README's Commands and the alert
// NodegcImageGCCannotFreeEnough send an operator to nodegc plan, they give
// the invocation in the node agent's pod with the agent's configuration:
// the image's entrypoint (hack/image), plan, and -c with the path the
// DaemonSet's agent runs with (its --config); README's pod selector
// selects the DaemonSet's pods. Without -c, plan takes the built-in
// defaults, which k3s, RKE2, CRI-O and custom-root nodes lack.
func TestPlanInAgentPodDocumented(t *testing.T) {
	var configPath string
	var podLabels map[string]string
	for _, o := range readObjects(t) {
		if o.GetKind() != "DaemonSet" || o.GetName() != "nodegc-node" {
			continue
		}
		for _, a := range containerArgs(t, o) {
			if p, ok := strings.CutPrefix(a, "--config="); ok {
				configPath = p
			}
		}
		podLabels, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
	}
	if configPath == "" {
		t.Fatalf("the DaemonSet nodegc-node of %s runs without --config", manifest)
	}
	entrypoint := regexp.MustCompile(`Entrypoint = \[\]string\{"([^"]+)"\}`).FindStringSubmatch(repoFile(t, "hack/image/main.go"))
	if entrypoint == nil {
		t.Fatal("hack/image/main.go sets no Entrypoint")
	}
	want := "-- " + entrypoint[1] + " plan -c " + configPath
	normalize := func(s string) string {
		var words []string
		for _, w := range strings.Fields(s) {
			if w != "\\" {
				words = append(words, w)
			}
		}
		return strings.Join(words, " ")
	}

	commands := normalize(readmeSection(t, repoFile(t, "README.md"), "## Commands"))
	rules := repoFile(t, "deploy/monitoring/prometheus-rules.yaml")
	alert := rules[strings.Index(rules, "alert: NodegcImageGCCannotFreeEnough"):]
	alert = normalize(alert[:strings.Index(alert, "runbook:")])
	for where, text := range map[string]string{"README.md, Commands": commands, "NodegcImageGCCannotFreeEnough": alert} {
		if !strings.Contains(text, "nodegc plan") {
			continue
		}
		if !strings.Contains(text, want) || !strings.Contains(text, "exec") {
			t.Errorf("%s mentions nodegc plan without the invocation in the agent's pod (kubectl exec ... %s):\n%s", where, want, text)
		}
	}
	sel := regexp.MustCompile(`exec \$\(kubectl -n \S+ get pod -l (\S+) --field-selector spec\.nodeName=\S+ -o name\) ` + regexp.QuoteMeta(want)).FindStringSubmatch(commands)
	if sel == nil {
		t.Fatalf("README.md, Commands, shows no kubectl exec $(kubectl get pod -l ... --field-selector spec.nodeName=NODE -o name) %s", want)
	}
	for _, kv := range strings.Split(sel[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		if podLabels[k] != v {
			t.Errorf("README's selector %s does not select the DaemonSet's pods (labels %v)", sel[1], podLabels)
		}
	}
}

// TestNodeAgentReadScopeDocumented: where an operator reads what the node
// agent's ServiceAccount can do (README's Deploy, the manifest's header,
// the chart's values and its ClusterRole), the docs say that its list and
// watch of pods and nodes are cluster-wide, as RBAC cannot narrow them to
// one node: every node's token reads every Pod spec (TestApplyAndRBAC
// checks the grant: pods list allowed without a namespace).
func TestNodeAgentReadScopeDocumented(t *testing.T) {
	values := repoFile(t, "deploy/helm/nodegc/values.yaml")
	texts := map[string]string{
		"README.md, Deploy":            readmeSection(t, repoFile(t, "README.md"), "## Deploy"),
		"deploy/daemonset.yaml header": strings.SplitN(repoFile(t, "deploy/daemonset.yaml"), "\napiVersion:", 2)[0],
		"values.yaml, node":            values[strings.Index(values, "\n# The node agent (DaemonSet nodegc-node)."):strings.Index(values, "\nnode:")],
		"node-rbac.yaml":               repoFile(t, "deploy/helm/nodegc/templates/node-rbac.yaml"),
	}
	for where, text := range texts {
		text = strings.Join(strings.Fields(strings.ReplaceAll(text, "#", " ")), " ")
		for _, want := range []string{"RBAC cannot narrow", "every Pod", "literal env values", "every Node"} {
			if !strings.Contains(strings.ReplaceAll(text, "`", ""), want) {
				t.Errorf("%s does not say %q", where, want)
			}
		}
	}
}
