package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/pkg/config"
)

// The config fields the chart sets from its own values (TestChartRefusesOwnedConfigFields), and
// nodeName (TestChartRefusesNodeName): not candidates here.
var chartOwnedConfig = []string{"apiVersion", "kind", "nodeName", "stateDirectory", "containerRuntimeEndpoint",
	"metricsBindAddress", "healthzBindAddress", "containerGC.podLogsDirectory", "containerGC.containerLogsDirectory",
	"leaderElection.resourceNamespace"}

// Candidate values of config's fields, by the field's Go type: each a value
// one of pkg/config's rules (a sign, a floor, a ceiling, a default for 0, a
// relation to another field at the chart's or the agent's default) puts on
// one side or the other.
var (
	durationCandidates = []string{"-1ns", "0", "0.5ns", "99ms", "100ms", "999ms", "1s", "24h", "24h1ns", "2562047h", "2562048h"}
	intCandidates      = []int64{-1, 0, 1, 100, 101}
	floatCandidates    = []float64{-1, 0, 0.5}
	boolCandidates     = []bool{true, false}
	stringCandidates   = []string{"", "x"}
)

// fieldCandidates are the candidates of fields that need their own: the
// strings with a form, the lists and maps (a map merges into the chart's,
// as Helm merges it), and durations at their relation to another field.
var fieldCandidates = map[string][]any{
	"imageServiceEndpoint": {"", "unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock",
		"unix://run/containerd/containerd.sock", "tcp://127.0.0.1:1234", "unix:///run/other/image.sock"},
	"clientConnection.kubeconfig":  {"", "kubeconfig", "./kubeconfig", "/etc/nodegc/kubeconfig"},
	"containerGC.minAgeFrom":       {"", "Created", "Exited", "Started"},
	"leaderElection.resourceLock":  {"", "leases", "endpointsleases"},
	"leaderElection.resourceName":  {"", "nodegc-owner-gc", "gc.example.com", "Bad_Name", strings.Repeat("a", 254)},
	"leaderElection.leaseDuration": {"10.999s", "11s"},
	"leaderElection.renewDeadline": {"2.4s", "2.5s", "14s", "15s"},
	"leaderElection.retryPeriod":   {"8s", "8.333s", "8.334s"},
	"imageGC.maximumGCAge":         {"2m", "2m1ns"},
	"imageGC.fillRateHorizon":      {"5m", "5m1ns", "1h"},
	"imageGC.exclude": {[]any{}, []any{""}, []any{"  "}, []any{"docker.io/library/busybox:*"},
		[]any{"registry.example/**/app"}, []any{"[abc"}, []any{"app-[ab"}, []any{`\[::1\]:5000/app`}, []any{"a[b/c]d"},
		[]any{`registry\[x/app`}, []any{"app:[0-9]*"}, []any{"[]abc"}, []any{`app\`}, []any{"[fd00::1]:5000/app"},
		// Patterns the agent reads and refuses (NeverMatches, Misread), and
		// neighbours it takes.
		[]any{"Nginx"}, []any{"MyApp:v1"}, []any{"registry.example/Team/app:*"}, []any{"Registry.Example/team/app"}, []any{"**/Team/app"},
		[]any{"sha256:5e1ce4d7a8c9b"}, []any{"sha256:ABCDEF*"}, []any{"sha256:0123abcd*"}, []any{"sha256:" + strings.Repeat("ab", 32)},
		[]any{"nginx, redis"}, []any{"@sha256:" + strings.Repeat("ab", 32)}, []any{"**@sha256:" + strings.Repeat("ab", 32)},
		[]any{"nginx:1.25@sha256:0123"}, []any{"nginx@sha256:ABC*"}, []any{"nginx@sha256:*"}, []any{"nginx@md5:*"},
		[]any{"5e1ce4d7a8c9"}, []any{strings.Repeat("ab", 32)}, []any{"abc123"},
		[]any{"ghcr.io/org/.*"}, []any{"ghcr.io/org/app:{v1,v2}"}, []any{"https://registry.example/app"}, []any{"registry.example//app"},
		[]any{"registry.k8s.io"}, []any{"localhost:5000"}, []any{"quay.io:latest"}, []any{"registry.k8s.io/pause"},
		[]any{"localhost:5000/x:*"}, []any{"localhost:v1"},
		[]any{"*nginx*"}, []any{"*-agent:*"}, []any{"*"}, []any{"*:*"}, []any{"[a-z]*"}, []any{"**/*nginx*"}, []any{"*/app"},
		[]any{"ngin*"}, []any{"docker.io/library/*nginx*"}, []any{"nginx:.hidden"},
		[]any{"nginx.*"}, []any{"ghcr.io/org/app.*"}, []any{"ghcr.io/org/app.*-worker:v*"}, []any{"ghcr.io/org/app[.]*"}, []any{`ghcr.io/org/app\.*`},
		[]any{"*.dkr.ecr.*.amazonaws.com/**"}, []any{"nginx:1.*"}, []any{"ghcr.io/org/app[.*]"}, []any{"ghcr.io/org/app[.*]-v.*"}},
	"imageGC.evictionHard": {
		map[string]any{"imagefs.available": "2Gi"}, map[string]any{"imagefs.available": " 15% "},
		map[string]any{"imagefs.available": "101%"}, map[string]any{"imagefs.available": "-1Gi"},
		map[string]any{"imagefs.available": "lots"}, map[string]any{"nodefs.available": "0%"},
		map[string]any{"nodefs.available": "100.5%"}, map[string]any{"memory.available": "100Mi"},
		map[string]any{"pid.available": "10%"}, map[string]any{"nodefs.inodesFree": "5%"},
		map[string]any{"foo.available": "1%"}},
	"imageGC.evictionSoft": {
		map[string]any{"imagefs.available": "25%"}, map[string]any{"nodefs.available": "30Gi"},
		map[string]any{"imagefs.available": "101%"}, map[string]any{"nodefs.available": "lots"},
		map[string]any{"memory.available": "200Mi"}, map[string]any{"foo.available": "1%"}},
	"ownerGC.gcIgnoredResources": {
		[]any{map[string]any{"resource": "events"}},
		[]any{map[string]any{"group": "apps", "resource": ""}},
		[]any{map[string]any{"group": "apps"}},
		[]any{map[string]any{"group": "apps", "resource": "replicasets"}, map[string]any{"group": "apps", "resource": "replicasets"}},
		[]any{map[string]any{"resource": "events"}, map[string]any{"group": "", "resource": "events"}},
		[]any{map[string]any{"group": "core", "resource": "configmaps"}}, []any{map[string]any{"group": "v1", "resource": "configmaps"}},
		[]any{map[string]any{"group": "apps/v1", "resource": "deployments"}}, []any{map[string]any{"resource": "ConfigMap"}},
		[]any{map[string]any{"group": "example.com", "resource": "widgets.example.com"}},
		[]any{map[string]any{"group": "apps", "resource": "deployment"}},
		[]any{map[string]any{"group": "Example.COM", "resource": "widgets"}}, []any{map[string]any{"group": "apps ", "resource": "deployments"}},
		[]any{map[string]any{"group": "*", "resource": "secrets"}}, []any{map[string]any{"group": "batch", "resource": " jobs"}},
		[]any{map[string]any{"group": "example.com", "resource": "*"}}, []any{map[string]any{"resource": "pods/status"}},
		[]any{map[string]any{"resource": "config_maps"}}, []any{map[string]any{"group": "-bad.example", "resource": "widgets"}},
		[]any{map[string]any{"group": "metrics.k8s.io", "resource": "pods"}}, []any{map[string]any{"group": "x-1.example.com", "resource": "a-1"}},
	},
}

// Where the chart and the agent differ on purpose, by case name: the
// chart refuses what the agent takes (the chart has its own reason), or
// takes what the agent refuses (a rule the chart cannot express, which
// README sends to nodegc config validate).
var (
	chartOnlyRefusals = map[string]string{
		"ownerGC.enableGarbageCollector=false":                 "the chart's way to turn the owner GC off is ownerGC.mode off (TestChartOwnerGCDisabled)",
		"leaderElection.leaderElect=false":                     "two owner collectors without an election (TestChartOwnerReplicas)",
		`imageServiceEndpoint="unix:///run/other/image.sock"`:  "a socket outside runtime.socket's directory, which the node agent does not mount",
		`clientConnection.kubeconfig="/etc/nodegc/kubeconfig"`: "a kubeconfig neither workload mounts: the pods use their ServiceAccount token",
	}
	agentOnlyRefusals = map[string]string{
		// The chart checks a [ left open in an exclusion pattern's component,
		// and the agent's reading of a pattern where a regular expression
		// says it exactly (nodegc.checkExclude); the rest of path.Match's
		// syntax, and the rest of that reading, are the agent's (README:
		// nodegc config validate).
		`imageGC.exclude=["[]abc"]`:              "a character class path.Match refuses, which the chart does not parse",
		`imageGC.exclude=["app\\"]`:              "a trailing backslash, which the chart does not parse",
		`imageGC.exclude=["[fd00::1]:5000/app"]`: "an IPv6 registry written as a pull writes it, whose brackets path.Match reads as a class",
		`imageGC.exclude=["registry\\[x/app"]`:   "an escaped [ in a registry name, which no reference holds (accepted before r7 F1, a warning); the chart leaves escapes to the agent",
		`imageGC.exclude=["nginx:.hidden"]`:      "a tag that starts with a dot; the chart checks a pattern's tag for commas, spaces and braces only",
	}
)

// agreementCase is a values file's config (and other values) and its name.
type agreementCase struct {
	name   string
	config map[string]any
	values map[string]any // besides config
	field  string         // a word the chart's refusal must say
}

// derivedCases are the candidates of every field of NodeGCConfiguration
// the chart does not own, by the field's type (fieldCandidates first),
// each alone on the chart's defaults; a field no candidate covers fails
// the test, so that one added to the type is covered.
func derivedCases(t *testing.T) []agreementCase {
	durationType := reflect.TypeFor[metav1.Duration]()
	var out []agreementCase
	var walk func(path []string, typ reflect.Type)
	walk = func(path []string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		p := strings.Join(path, ".")
		if slices.Contains(chartOwnedConfig, p) {
			return
		}
		var cands []any
		switch {
		case typ == durationType:
			for _, d := range durationCandidates {
				cands = append(cands, d)
			}
		case typ.Kind() == reflect.Struct:
			fields := map[string]reflect.Type{}
			collectJSONFields(typ, fields)
			for _, name := range slices.Sorted(maps.Keys(fields)) {
				walk(append(slices.Clone(path), name), fields[name])
			}
			return
		case typ.Kind() == reflect.Int32 || typ.Kind() == reflect.Int64:
			for _, v := range intCandidates {
				cands = append(cands, v)
			}
		case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
			for _, v := range floatCandidates {
				cands = append(cands, v)
			}
		case typ.Kind() == reflect.Bool:
			for _, v := range boolCandidates {
				cands = append(cands, v)
			}
		case typ.Kind() == reflect.String:
			if _, ok := fieldCandidates[p]; !ok {
				for _, v := range stringCandidates {
					cands = append(cands, v)
				}
			}
		default:
			if _, ok := fieldCandidates[p]; !ok {
				t.Errorf("config.%s (%s): no candidate values; add some to fieldCandidates", p, typ)
			}
		}
		cands = append(cands, fieldCandidates[p]...)
		for _, v := range cands {
			raw, _ := json.Marshal(v)
			cfg := map[string]any{}
			m := cfg
			for _, k := range path[:len(path)-1] {
				sub := map[string]any{}
				m[k] = sub
				m = sub
			}
			m[path[len(path)-1]] = v
			out = append(out, agreementCase{name: p + "=" + string(raw), config: cfg, field: path[len(path)-1]})
		}
	}
	walk(nil, reflect.TypeFor[config.NodeGCConfiguration]())
	return out
}

// crossCases set two fields at once: a duration beside another left to
// the agent's default (null), which the chart must know as the agent does,
// and the election's rules, which hold only with leader election on.
func crossCases() []agreementCase {
	c := func(name, field string, cfg map[string]any, values map[string]any) agreementCase {
		return agreementCase{name: name, config: cfg, values: values, field: field}
	}
	oneOwner := map[string]any{"ownerGC": map[string]any{"replicas": 1}}
	return []agreementCase{
		c("maximumGCAge 2m, minimumGCAge the agent's", "maximumGCAge", map[string]any{"imageGC": map[string]any{"minimumGCAge": nil, "maximumGCAge": "2m"}}, nil),
		c("maximumGCAge 2m1ns, minimumGCAge the agent's", "maximumGCAge", map[string]any{"imageGC": map[string]any{"minimumGCAge": nil, "maximumGCAge": "2m1ns"}}, nil),
		c("maxAge = minAge", "maxAge", map[string]any{"containerGC": map[string]any{"minAge": "1h", "maxAge": "1h"}}, nil),
		c("maxAge > minAge", "maxAge", map[string]any{"containerGC": map[string]any{"minAge": "1h", "maxAge": "1h1ns"}}, nil),
		c("renewDeadline 15s, leaseDuration the agent's", "renewDeadline", map[string]any{"leaderElection": map[string]any{"leaseDuration": nil, "renewDeadline": "15s"}}, nil),
		c("renewDeadline 14s, leaseDuration the agent's", "renewDeadline", map[string]any{"leaderElection": map[string]any{"leaseDuration": nil, "renewDeadline": "14s"}}, nil),
		c("retryPeriod 8.4s, renewDeadline the agent's", "retryPeriod", map[string]any{"leaderElection": map[string]any{"renewDeadline": nil, "retryPeriod": "8.4s"}}, nil),
		c("retryPeriod 8.3s, renewDeadline the agent's", "retryPeriod", map[string]any{"leaderElection": map[string]any{"renewDeadline": nil, "retryPeriod": "8.3s"}}, nil),
		c("leaseDuration 10s, renewDeadline the agent's", "leaseDuration", map[string]any{"leaderElection": map[string]any{"renewDeadline": nil, "leaseDuration": "10s"}}, nil),
		c("no election, leaseDuration 1s", "leaseDuration", map[string]any{"leaderElection": map[string]any{"leaderElect": false, "leaseDuration": "1s"}}, oneOwner),
		c("no election, resourceName Bad_Name", "resourceName", map[string]any{"leaderElection": map[string]any{"leaderElect": false, "resourceName": "Bad_Name"}}, oneOwner),
		c("no election, leaseDuration -1s", "leaseDuration", map[string]any{"leaderElection": map[string]any{"leaderElect": false, "leaseDuration": "-1s"}}, oneOwner),
	}
}

// mergeValues merges src into dst as Helm merges values into the chart's:
// maps key by key, null removes a key, anything else replaces.
func mergeValues(dst, src map[string]any) {
	for k, v := range src {
		switch sv := v.(type) {
		case nil:
			delete(dst, k)
		case map[string]any:
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			mergeValues(dm, sv)
		default:
			dst[k] = sv
		}
	}
}

// agentVerdict is what nodegc run and nodegc config validate say of the
// chart's configuration with cfg merged into it: nil when it is valid.
func agentVerdict(base map[string]any, cfg map[string]any) error {
	raw, err := json.Marshal(base)
	if err != nil {
		return err
	}
	var merged map[string]any
	if err := json.Unmarshal(raw, &merged); err != nil {
		return err
	}
	mergeValues(merged, cfg)
	data, err := yaml.Marshal(merged)
	if err != nil {
		return err
	}
	loaded, err := config.Decode(data)
	if err != nil {
		return err
	}
	if errs := config.Validate(loaded.Config); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// TestChartConfigAgreesWithAgent: a config value the node agents refuse at
// start (nodegc's validation, pkg/config) fails the render, naming the
// field, and one they accept renders, but where listed above
// (chartOnlyRefusals, agentOnlyRefusals, each with its reason). The
// candidates are derived from NodeGCConfiguration, field by field (every
// field the chart does not own), with values on both sides of each of
// pkg/config's rules, the rules between fields included; the verdict on
// each side is the agent's own code, on the chart's configuration with the
// value merged in as Helm merges it, and real helm's, schema and templates
// together. Before, a value such as containerGC.maxPerPodContainer 0,
// imageGC.diskCheckInterval 10ms or runtimeRequestTimeout 25h was
// installed, and every node agent crash-looped on it.
func TestChartConfigAgreesWithAgent(t *testing.T) {
	cm := find(render(t, "nodegc"), "ConfigMap", "nodegc-config")
	if cm == nil {
		t.Fatal("no ConfigMap nodegc-config")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	var base map[string]any
	if err := yaml.Unmarshal([]byte(data), &base); err != nil {
		t.Fatal(err)
	}
	if err := agentVerdict(base, nil); err != nil {
		t.Fatalf("the chart's own configuration: %v", err)
	}
	cases := append(derivedCases(t), crossCases()...)
	seen := map[string]bool{}
	dir := t.TempDir()
	for i, tc := range cases {
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			agentErr := agentVerdict(base, tc.config)
			values := map[string]any{"config": tc.config}
			maps.Copy(values, tc.values)
			raw, err := json.Marshal(values)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, fmt.Sprintf("case-%d.yaml", i))
			if err := os.WriteFile(file, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			_, helmErr := helm(t, "template", "nodegc", chart, "--namespace", "nodegc", "-f", file)
			chartOnly, agentOnly := chartOnlyRefusals[tc.name], agentOnlyRefusals[tc.name]
			switch {
			case agentOnly != "":
				if agentErr == nil || helmErr != nil {
					t.Errorf("listed as refused by the agent alone (%s): the agent says %v, helm %v; update agentOnlyRefusals", agentOnly, agentErr, helmErr)
				}
			case chartOnly != "":
				if agentErr != nil || helmErr == nil {
					t.Errorf("listed as refused by the chart alone (%s): the agent says %v, helm %v; update chartOnlyRefusals", chartOnly, agentErr, helmErr)
				}
			case agentErr != nil && helmErr == nil:
				t.Errorf("every node agent would refuse this configuration at start (%v), and the chart renders it", agentErr)
			case agentErr == nil && helmErr != nil:
				t.Errorf("the agent takes this configuration, and the chart refuses it: %v", helmErr)
			case helmErr != nil && !strings.Contains(helmErr.Error(), tc.field):
				t.Errorf("the chart's refusal does not name %s: %v", tc.field, helmErr)
			}
		})
	}
	for name := range maps.Keys(chartOnlyRefusals) {
		if !seen[name] {
			t.Errorf("chartOnlyRefusals lists %s, which no case has", name)
		}
	}
	for name := range maps.Keys(agentOnlyRefusals) {
		if !seen[name] {
			t.Errorf("agentOnlyRefusals lists %s, which no case has", name)
		}
	}
}
