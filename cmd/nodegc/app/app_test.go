package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/pkg/config"
)

func runMain(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	code, out, _ := runMain(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "nodegc v") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("version: code %d, output %q", code, out)
	}
	code, out, _ = runMain(t, "", "version", "-o", "json")
	var info map[string]string
	if err := json.Unmarshal([]byte(out), &info); err != nil || code != 0 {
		t.Fatalf("version -o json: code %d, %v, output %q", code, err, out)
	}
	if info["goVersion"] != runtime.Version() || info["version"] == "" || info["commit"] == "" {
		t.Errorf("version -o json = %v", info)
	}
}

// TestDefaultsValidate is `nodegc config defaults | nodegc config validate -f -`.
func TestDefaultsValidate(t *testing.T) {
	code, defaults, errOut := runMain(t, "", "config", "defaults")
	if code != 0 {
		t.Fatalf("config defaults: code %d, stderr %q", code, errOut)
	}
	want, err := config.Marshal(config.Defaulted())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), defaults); diff != "" {
		t.Errorf("config defaults (-want +got):\n%s", diff)
	}
	code, out, errOut := runMain(t, defaults, "config", "validate", "-f", "-")
	if code != 0 || out != "<stdin>: valid\n" {
		t.Errorf("config validate -f -: code %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestValidateExample(t *testing.T) {
	code, _, errOut := runMain(t, "", "config", "validate", "-f", filepath.Join("..", "..", "..", "examples", "nodegc.yaml"))
	if code != 0 {
		t.Errorf("validate examples/nodegc.yaml: code %d, stderr %q", code, errOut)
	}
}

// TestValidateFiveMistakes: five different mistakes give five errors, each
// with its line and field path, and exit code 1.
func TestValidateFiveMistakes(t *testing.T) {
	file := writeFile(t, `apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
containerRuntimeEndpoint: unix://run/containerd/containerd.sock
imageGC:
  lowThresholdPercent: 90
  maximumGCAge: 1m
containerGC:
  minAgeFrom: Started
leaderElection:
  leaseDuration: 5s
`)
	code, out, errOut := runMain(t, "", "config", "validate", "-f", file)
	if code != 1 || out != "" {
		t.Fatalf("code %d (want 1), stdout %q", code, out)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	var got []string
	for _, l := range lines[:len(lines)-1] {
		parts := strings.SplitN(strings.TrimPrefix(l, file+": "), ": ", 4) // line, path, type, detail
		got = append(got, strings.Join(parts[:min(3, len(parts))], ": "))
	}
	want := []string{
		"line 3: containerRuntimeEndpoint: Invalid value",
		"line 5: imageGC.lowThresholdPercent: Invalid value",
		"line 6: imageGC.maximumGCAge: Invalid value",
		"line 8: containerGC.minAgeFrom: Unsupported value",
		"line 10: leaderElection.leaseDuration: Invalid value",
	}
	if len(got) != 5 {
		t.Fatalf("want 5 problems, got %d:\n%s", len(got), errOut)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\nfull stderr:\n%s", diff, errOut)
	}
	if last := lines[len(lines)-1]; last != file+": 5 problem(s); the configuration is invalid" {
		t.Errorf("last line = %q", last)
	}
}

// TestValidateRefusesNodegcFieldsInKubeletDocument: `config validate`
// refuses a file whose KubeletConfiguration document holds a section of
// nodegc's (appended after the kubelet document), naming the document it
// belongs in; the agent would otherwise run without it.
func TestValidateRefusesNodegcFieldsInKubeletDocument(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n---\n"+
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"+
		"imageGC:\n  exclude: [\"registry.example/critical/*\"]\n")
	code, _, errOut := runMain(t, "", "config", "validate", "-f", file)
	want := file + ": line 7: imageGC: a NodeGCConfiguration field, in the KubeletConfiguration document (line 4), which has no such field: " +
		"nodegc would ignore it there; it belongs in the NodeGCConfiguration document (line 1)\n" +
		file + ": 1 problem(s); the configuration is invalid\n"
	if code != 1 || errOut != want {
		t.Errorf("code %d, stderr:\n%s\nwant:\n%s", code, errOut, want)
	}
}

func TestValidateDecodeErrors(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nimageGC:\n  colour: blue\n  period: 1m\n  period: 2m\n")
	code, _, errOut := runMain(t, "", "config", "validate", "-f", file)
	want := file + ": line 4: imageGC.colour: unknown field\n" +
		file + ": line 6: imageGC.period: duplicate key (first set at line 5)\n" +
		file + ": 2 problem(s); the configuration is invalid\n"
	if code != 1 || errOut != want {
		t.Errorf("code %d, stderr:\n%s\nwant:\n%s", code, errOut, want)
	}
}

// TestDecodeAndValidationProblemsTogether: a file with an unknown field, a
// value of the wrong type and invalid values gets every problem listed, in
// line order with the count last, by `config validate` and by `run`, which
// refuses to start.
func TestDecodeAndValidationProblemsTogether(t *testing.T) {
	file := writeFile(t, `apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
imageGC:
  highThresholdPercnt: 80
  lowThresholdPercent: 120
containerGC:
  maxPerPodContainer: 0
  period: banana
`)
	want := []string{
		"line 4: imageGC.highThresholdPercnt: unknown field",
		"line 5: imageGC.lowThresholdPercent: Invalid value: 120: must be between 0 and 100, inclusive",
		"line 5: imageGC.lowThresholdPercent: Invalid value: 120: must be less than highThresholdPercent (85)",
		"line 7: containerGC.maxPerPodContainer: Invalid value: 0: must be at least 1",
		"line 8: containerGC.period: time: invalid duration \"banana\"",
		"5 problem(s); the configuration is invalid",
	}
	cases := map[string][]string{
		"config validate": {"config", "validate", "-f", file},
		"run":             {"run", "--config", file, "--metrics-bind-address=0", "--healthz-bind-address=0"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runMain(t, "", args...)
			if code != 1 || out != "" {
				t.Errorf("code %d (want 1), stdout %q", code, out)
			}
			var got []string
			for i, l := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
				l, ok := strings.CutPrefix(l, file+": ")
				if !ok {
					t.Errorf("stderr line %d %q does not start with the file name", i+1, l)
				}
				// Keep the line, path and the start of the message.
				if i < len(want) && strings.HasPrefix(l, want[i]) {
					l = want[i]
				}
				got = append(got, l)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stderr (-want +got, each line cut to the wanted prefix):\n%s\nfull stderr:\n%s", diff, errOut)
			}
		})
	}
}

func TestValidateRequiresFile(t *testing.T) {
	code, _, errOut := runMain(t, "", "config", "validate")
	if code != 1 || !strings.Contains(errOut, "at least one of the flags in the group [file config] is required") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

// TestValidateTakesTheConfigFlag: every other command takes its
// configuration file as -c/--config, so validate takes it so too, beside
// -f/--file (one of them, not both); a file given without a flag gets an
// error that says how to give it. Before, "config validate -c FILE" failed
// with "unknown shorthand flag: 'c'", and "config validate FILE" with
// "unknown command".
func TestValidateTakesTheConfigFlag(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n")
	for _, flag := range []string{"-c", "--config", "-f", "--file"} {
		if code, out, errOut := runMain(t, "", "config", "validate", flag, file); code != 0 || out != file+": valid\n" {
			t.Errorf("config validate %s FILE: code %d, stdout %q, stderr %q; want 0 and valid", flag, code, out, errOut)
		}
	}
	if code, _, errOut := runMain(t, "", "config", "validate", "-c", file, "-f", file); code != 1 || !strings.Contains(errOut, "none of the others can be") {
		t.Errorf("config validate -c FILE -f FILE: code %d, stderr %q; want 1, refused as two files", code, errOut)
	}
	if code, _, errOut := runMain(t, "", "config", "validate", file); code != 1 || !strings.Contains(errOut, "nodegc config validate -f "+file) {
		t.Errorf("config validate FILE: code %d, stderr %q; want 1, saying to give it with -f", code, errOut)
	}
}

func TestValidateMissingFile(t *testing.T) {
	code, _, errOut := runMain(t, "", "config", "validate", "-f", "/nonexistent/nodegc.yaml")
	if code != 1 || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestRunRefusesInvalidConfig(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nimageGC:\n  highThresholdPercent: 120\n")
	code, _, errOut := runMain(t, "", "run", "--config", file)
	if code != 1 || !strings.Contains(errOut, "line 4: imageGC.highThresholdPercent: Invalid value: 120") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestRunOwnerGCOnlyNeedsAPI(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster
	code, _, errOut := runMain(t, "", "run", "--owner-gc=only", "--metrics-bind-address=0", "--healthz-bind-address=0")
	if code != 1 || !strings.Contains(errOut, "--owner-gc=only needs API access") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestRunFlagsAreValidatedWithTheConfig(t *testing.T) {
	code, _, errOut := runMain(t, "", "run", "--metrics-bind-address=nowhere")
	if code != 1 || !strings.Contains(errOut, "metricsBindAddress: Invalid value") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

// TestFlagsOverrideTheFileBeforeValidation: a file whose bind addresses
// clash (metricsBindAddress 127.0.0.1:10280, healthzBindAddress at its
// default :10280) is made valid by a --healthz-bind-address or
// --metrics-bind-address that moves one of them: run, plan and explain
// (runOptions.load) validate the file with the flags applied, once, while
// `config validate -f` still validates the file alone. Before, load
// validated the file alone first and refused to start, blaming the file's
// default ":10280" and saying nothing of the flag; and plan and explain
// took neither flag ("unknown flag"), so that `nodegc plan` in the pod of
// an agent started with one refused the agent's configuration, and
// explain asked the file's metrics address, not the agent's.
func TestFlagsOverrideTheFileBeforeValidation(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: \"127.0.0.1:10280\"\n")
	for flag, c := range map[string]struct {
		o    runOptions
		want [2]string // metrics, healthz
	}{
		"--healthz-bind-address": {runOptions{configFile: file, healthzBindAddress: ":10290"}, [2]string{"127.0.0.1:10280", ":10290"}},
		"--metrics-bind-address": {runOptions{configFile: file, metricsBindAddress: "127.0.0.1:10291"}, [2]string{"127.0.0.1:10291", ":10280"}},
	} {
		var errOut bytes.Buffer
		cfg, err := c.o.load(streams{in: strings.NewReader(""), out: io.Discard, err: &errOut})
		if err != nil {
			t.Errorf("the file with %s refused: %v\n%s", flag, err, errOut.String())
			continue
		}
		if got := [2]string{cfg.MetricsBindAddress, cfg.HealthzBindAddress}; got != c.want || errOut.Len() > 0 {
			t.Errorf("the file with %s: metrics and healthz bind addresses %q, want %q; stderr %q", flag, got, c.want, errOut.String())
		}
	}
	code, _, errOut := runMain(t, "", "config", "validate", "-f", file)
	if code != 1 || !strings.Contains(errOut, `healthzBindAddress: Invalid value: ":10280": listens on the port of metricsBindAddress`) {
		t.Errorf("config validate -f of the file alone: code %d, stderr %q; want the clash", code, errOut)
	}

	// plan takes the flags: it gets past the configuration (to the
	// runtime, which is not there).
	noRuntime := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: \"127.0.0.1:10280\"\n"+
		"containerRuntimeEndpoint: unix://"+filepath.Join(t.TempDir(), "none.sock")+"\n")
	_, _, errOut = runMain(t, "", "plan", "-c", noRuntime, "--healthz-bind-address=:10290")
	if strings.Contains(errOut, "unknown flag") || strings.Contains(errOut, "BindAddress") {
		t.Errorf("plan with --healthz-bind-address: %q; want the flag applied", errOut)
	}
	// explain asks the agent at the flag's metrics address.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing answers there
	_, _, errOut = runMain(t, "", "explain", "cm/x", "-c", file, "--metrics-bind-address="+addr)
	if !strings.Contains(errOut, "no nodegc agent answers at http://"+addr+" (metricsBindAddress "+addr+", from --metrics-bind-address)") {
		t.Errorf("explain with --metrics-bind-address=%s: %q; want it to ask the agent there", addr, errOut)
	}
	// Without a file, a flag that clashes with a default is blamed on the
	// defaults and flags, not on a file with no name (": --metrics-...").
	var noFile bytes.Buffer
	if _, err := (&runOptions{metricsBindAddress: "127.0.0.1:10280"}).load(streams{in: strings.NewReader(""), out: io.Discard, err: &noFile}); err == nil {
		t.Fatal("--metrics-bind-address on the default healthz address, no file: accepted")
	}
	for line := range strings.Lines(noFile.String()) {
		if !strings.HasPrefix(line, noFileName+": ") {
			t.Errorf("a problem without a file: %q; want it prefixed %q", line, noFileName+": ")
		}
	}
}

func TestResolveNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	if got, err := resolveNodeName("from-config"); err != nil || got != "from-config" {
		t.Errorf("resolveNodeName(config) = %q, %v", got, err)
	}
	if got, err := resolveNodeName(""); err != nil || got != "from-env" {
		t.Errorf("resolveNodeName(env) = %q, %v", got, err)
	}
	t.Setenv("NODE_NAME", "")
	host, _ := os.Hostname()
	if got, err := resolveNodeName(""); err != nil || got != strings.ToLower(host) {
		t.Errorf("resolveNodeName(host) = %q, %v; want %q", got, err, strings.ToLower(host))
	}
	t.Setenv("NODE_NAME", "Bad_Name")
	if _, err := resolveNodeName(""); err == nil || !strings.Contains(err.Error(), "set nodeName or NODE_NAME") {
		t.Errorf("resolveNodeName(bad) error = %v", err)
	}
	// The kubelet lower-cases its --hostname-override: say so.
	t.Setenv("NODE_NAME", "Worker-1")
	if _, err := resolveNodeName(""); err == nil || !strings.Contains(err.Error(), `the kubelet registers its node name lower-cased (--hostname-override=Worker-1 registers Node worker-1): write "worker-1"`) {
		t.Errorf("resolveNodeName(Worker-1) error = %v, want the lower-case hint", err)
	}
}

// TestNodeNameWarning: a nodeName in the config that is not the node the
// pod runs on (NODE_NAME) is warned about; either alone, or both equal, is
// not.
func TestNodeNameWarning(t *testing.T) {
	t.Setenv("NODE_NAME", "node-a")
	if w := nodeNameWarning("node-b"); !strings.Contains(w, `"node-b"`) || !strings.Contains(w, `"node-a"`) {
		t.Errorf("nodeName node-b on node-a: warning %q", w)
	}
	for _, fromConfig := range []string{"", "node-a"} {
		if w := nodeNameWarning(fromConfig); w != "" {
			t.Errorf("nodeName %q on node-a: warning %q, want none", fromConfig, w)
		}
	}
	t.Setenv("NODE_NAME", "")
	if w := nodeNameWarning("node-b"); w != "" {
		t.Errorf("nodeName node-b, no NODE_NAME: warning %q, want none", w)
	}
}

func TestRunOwnerGCFlag(t *testing.T) {
	code, _, errOut := runMain(t, "", "run", "--owner-gc=sometimes")
	if code != 1 || !strings.Contains(errOut, "--owner-gc must be one of auto, only, off") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestKlogFlags(t *testing.T) {
	code, out, _ := runMain(t, "", "--help")
	if code != 0 || !strings.Contains(out, "-v, --v Level") {
		t.Errorf("--help lacks klog's -v: code %d\n%s", code, out)
	}
}

// TestRunAutoNeedsLeaderElection: --owner-gc=auto (every DaemonSet pod
// joins the election) with leader election off would run the owner GC in
// every agent of the cluster, each watching every resource and deleting:
// refused, naming the field and the flag. Without an owner GC to run
// (enableGarbageCollector: false) there is nothing to elect.
func TestRunAutoNeedsLeaderElection(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nleaderElection:\n  leaderElect: false\n")
	code, _, errOut := runMain(t, "", "run", "--config", file, "--owner-gc=auto", "--metrics-bind-address=0", "--healthz-bind-address=0")
	if code != 1 || !strings.Contains(errOut, "leaderElection.leaderElect") || !strings.Contains(errOut, "--owner-gc=auto") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

// TestRunOnlyNeedsTheOwnerGC: --owner-gc=only (the owner collector's
// Deployment) runs no node GC, so with the owner GC disabled in the config
// it would run nothing, while NodegcOwnerGCNoSyncedLeader, seeing an owner
// collector scraped, fires: refused, naming the field, the flag and what to
// do instead.
func TestRunOnlyNeedsTheOwnerGC(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nownerGC:\n  enableGarbageCollector: false\n")
	code, _, errOut := runMain(t, "", "run", "--config", file, "--owner-gc=only", "--metrics-bind-address=0", "--healthz-bind-address=0")
	if code != 1 || !strings.Contains(errOut, "ownerGC.enableGarbageCollector") || !strings.Contains(errOut, "--owner-gc=only") || !strings.Contains(errOut, "ownerGC.mode off") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

// TestRunOnlyWithoutLeaderElectionWarns: --owner-gc=only without a Lease
// is valid for one replica, but two (the chart's owner Deployment) would
// each collect: a warning says so; with leader election, none.
func TestRunOnlyWithoutLeaderElectionWarns(t *testing.T) {
	load := func(doc string) *config.NodeGCConfiguration {
		t.Helper()
		loaded, err := config.Decode([]byte("apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n" + doc))
		if err != nil {
			t.Fatal(err)
		}
		return loaded.Config
	}
	solo := load("leaderElection:\n  leaderElect: false\n")
	if w := soloOwnerGCWarning(agent.OwnerGCOnly, solo); !strings.Contains(w, "leaderElection.leaderElect: false") || !strings.Contains(w, "run exactly one") {
		t.Errorf("only, no Lease: warning %q", w)
	}
	if w := soloOwnerGCWarning(agent.OwnerGCOnly, load("")); w != "" {
		t.Errorf("only, with a Lease: warning %q, want none", w)
	}
	if w := soloOwnerGCWarning(agent.OwnerGCOff, solo); w != "" {
		t.Errorf("off: warning %q, want none", w)
	}
}

// TestProblemsSayWhereTheValueCameFrom: a value a flag gave is blamed on
// the flag, not on the file's line for the same field; a value taken from
// the KubeletConfiguration document says so: a low threshold taken from
// the kubelet's (70/60) over the nodegc document's high one (40) must not
// leave the operator wondering where the 60 came from. Beside a kubelet
// whose image GC is off (100/99), nothing is taken, and a high threshold
// alone is valid.
func TestProblemsSayWhereTheValueCameFrom(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: \":10281\"\n")
	code, _, errOut := runMain(t, "", "run", "--config", file, "--metrics-bind-address=10281")
	if code != 1 || strings.Contains(errOut, "line 3") || !strings.Contains(errOut, "--metrics-bind-address") {
		t.Errorf("a bad flag value: code %d, stderr %q; want it blamed on --metrics-bind-address, not line 3", code, errOut)
	}

	kubelet := func(high, low int) string {
		return fmt.Sprintf("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
			"imageGCHighThresholdPercent: %d\nimageGCLowThresholdPercent: %d\n---\n", high, low)
	}
	file = writeFile(t, kubelet(70, 60)+"apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nimageGC:\n  highThresholdPercent: 40\n")
	code, _, errOut = runMain(t, "", "config", "validate", "-f", file)
	if code != 1 || !strings.Contains(errOut, "imageGC.lowThresholdPercent") || !strings.Contains(errOut, "KubeletConfiguration") {
		t.Errorf("a low threshold taken from the kubelet: code %d, stderr %q; want it to name the KubeletConfiguration", code, errOut)
	}
	file = writeFile(t, kubelet(100, 99)+"apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nimageGC:\n  highThresholdPercent: 85\n")
	code, _, errOut = runMain(t, "", "config", "validate", "-f", file)
	if code != 0 || !strings.Contains(errOut, "its image GC off") {
		t.Errorf("a high threshold beside a kubelet whose image GC is off: code %d, stderr %q; want valid, with a warning", code, errOut)
	}
}

// TestConfigValidateLeaderElectFalse: `config validate` refuses what `run`
// with the same --owner-gc refuses (auto unless given, as for run), with
// the same message, naming the file and the line of the field: a ConfigMap
// checked with `config validate` must not crash-loop the agents. Before,
// validate said valid for leaderElect: false, and run's refusal named no
// file or line.
func TestConfigValidateLeaderElectFalse(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nleaderElection:\n  leaderElect: false\n")
	const msg = "line 4: leaderElection.leaderElect: false with --owner-gc=auto would run the owner GC in every agent"
	code, _, errOut := runMain(t, "", "config", "validate", "-f", file)
	if code != 1 || !strings.HasPrefix(errOut, file+": "+msg) || !strings.HasSuffix(errOut, file+": 1 problem(s); the configuration is invalid\n") {
		t.Errorf("config validate: code %d, stderr %q; want 1 and %q", code, errOut, file+": "+msg)
	}
	code, _, runErr := runMain(t, "", "run", "--config", file, "--metrics-bind-address=0", "--healthz-bind-address=0")
	if code != 1 || runErr != errOut {
		t.Errorf("run: code %d, stderr %q; want 1 and what config validate says, %q", code, runErr, errOut)
	}
	code, out, errOut := runMain(t, "", "config", "validate", "-f", file, "--owner-gc=off")
	if code != 0 || out != file+": valid\n" || errOut != "" {
		t.Errorf("config validate --owner-gc=off: code %d, stdout %q, stderr %q; want valid", code, out, errOut)
	}
	code, out, errOut = runMain(t, "", "config", "validate", "-f", file, "--owner-gc=only")
	if code != 0 || out != file+": valid\n" || !strings.Contains(errOut, "warning: --owner-gc=only with leaderElection.leaderElect: false") {
		t.Errorf("config validate --owner-gc=only: code %d, stdout %q, stderr %q; want valid with run's warning", code, out, errOut)
	}
	code, _, errOut = runMain(t, "", "config", "validate", "-f", file, "--owner-gc=sometimes")
	if code != 1 || !strings.Contains(errOut, "--owner-gc must be one of auto, only, off") {
		t.Errorf("config validate --owner-gc=sometimes: code %d, stderr %q", code, errOut)
	}

	off := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nownerGC:\n  enableGarbageCollector: false\n")
	code, _, errOut = runMain(t, "", "config", "validate", "-f", off, "--owner-gc=only")
	if code != 1 || !strings.HasPrefix(errOut, off+": line 4: ownerGC.enableGarbageCollector: false with --owner-gc=only would run nothing") {
		t.Errorf("config validate --owner-gc=only, owner GC off: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut = runMain(t, "", "config", "validate", "-f", off); code != 0 {
		t.Errorf("config validate, owner GC off, auto: code %d, stderr %q; want valid", code, errOut)
	}
}

// TestFlagsApplyToAFileThatDoesNotDecode: the bind-address flags that fix
// a clash of the file (TestFlagsOverrideTheFileBeforeValidation) also
// apply when the file has a decode problem, whose validation is printed
// with it: only the decode problem is printed, not the clash the flag
// fixed; and a bad flag value is blamed on the flag there too. Before, the
// clash was printed beside the typo (2 problems), sending the operator to
// change a value that is not wrong.
func TestFlagsApplyToAFileThatDoesNotDecode(t *testing.T) {
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\nmetricsBindAddress: \"127.0.0.1:10280\"\nimageGC:\n  perod: 5m\n")
	want := file + ": line 5: imageGC.perod: unknown field\n" + file + ": 1 problem(s); the configuration is invalid\n"
	for _, cmd := range []string{"run", "plan"} {
		code, _, errOut := runMain(t, "", cmd, "-c", file, "--healthz-bind-address", ":9999")
		if code != 1 || errOut != want {
			t.Errorf("%s -c FILE --healthz-bind-address :9999: code %d, stderr:\n%s\nwant:\n%s", cmd, code, errOut, want)
		}
	}
	code, _, errOut := runMain(t, "", "run", "-c", file, "--healthz-bind-address", ":9999", "--metrics-bind-address", "nowhere")
	if code != 1 || !strings.Contains(errOut, file+": --metrics-bind-address: metricsBindAddress: Invalid value: \"nowhere\"") ||
		!strings.Contains(errOut, "2 problem(s)") {
		t.Errorf("a bad flag value beside a decode problem: code %d, stderr:\n%s\nwant it blamed on --metrics-bind-address", code, errOut)
	}
}
