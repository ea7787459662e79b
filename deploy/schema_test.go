package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/pkg/config"
)

// schemaNode is the part of a JSON schema the tests read.
type schemaNode struct {
	Ref                  string                 `json:"$ref"`
	Type                 any                    `json:"type"`
	Properties           map[string]*schemaNode `json:"properties"`
	AdditionalProperties any                    `json:"additionalProperties"`
	Items                *schemaNode            `json:"items"`
	Pattern              string                 `json:"pattern"`
	Definitions          map[string]*schemaNode `json:"definitions"`
}

func loadSchema(t *testing.T) *schemaNode {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s schemaNode
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// resolve follows a node's $ref into the root's definitions.
func (root *schemaNode) resolve(n *schemaNode) *schemaNode {
	if name, ok := strings.CutPrefix(n.Ref, "#/definitions/"); ok {
		return root.Definitions[name]
	}
	return n
}

// types returns the JSON types a node allows.
func (n *schemaNode) types() []string {
	switch v := n.Type.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			out = append(out, e.(string))
		}
		return out
	}
	return nil
}

func (n *schemaNode) closed() bool { return n.AdditionalProperties == false }

// TestChartSchemaRefuses: the values' schema makes helm lint --strict and
// helm template (so helm install and upgrade) refuse values the chart
// would otherwise render into a ConfigMap every node agent refuses at its
// next start (a crash loop that spreads past the DaemonSet's
// maxUnavailable, the ConfigMap being updated in place), or into objects
// the API server refuses: the review's misspelt key and percentage given
// as a string, a duration given as a number, out-of-range values, unknown
// keys of the chart's own; and an image tag a values file gives as a
// number, which YAML reads as one and the chart would render as another
// tag (20240101 as 2.0240101e+07, 1.10 as 1.1).
func TestChartSchemaRefuses(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"misspelt config key":     {[]string{"--set", "config.imageGC.highThresholdPercnt=90"}, "at '/config/imageGC': additional properties 'highThresholdPercnt' not allowed"},
		"unknown config section":  {[]string{"--set", "config.imageGc.period=1m"}, "at '/config': additional properties 'imageGc' not allowed"},
		"percent as a string":     {[]string{"--set-string", "config.imageGC.highThresholdPercent=90"}, "at '/config/imageGC/highThresholdPercent': got string, want null or integer"},
		"percent over 100":        {[]string{"--set", "config.imageGC.highThresholdPercent=101"}, "at '/config/imageGC/highThresholdPercent': maximum"},
		"duration as a number":    {[]string{"--set", "config.imageGC.minimumGCAge=5"}, "at '/config/imageGC/minimumGCAge': got number, want null or string"},
		"duration in days":        {[]string{"--set", "config.imageGC.maximumGCAge=7d"}, "at '/config/imageGC/maximumGCAge': '7d' does not match pattern"},
		"unknown minAgeFrom":      {[]string{"--set", "config.containerGC.minAgeFrom=Started"}, "at '/config/containerGC/minAgeFrom': value must be one of"},
		"unknown top-level value": {[]string{"--set", "imageTag=v1"}, "additional properties 'imageTag' not allowed"},
		"unknown node value":      {[]string{"--set", "node.tolerations=null", "--set", "node.toleration[0].operator=Exists"}, "at '/node': additional properties 'toleration' not allowed"},
		"port as a string":        {[]string{"--set-string", "ports.metrics=10281"}, "at '/ports/metrics': got string, want integer"},
		"pull policy":             {[]string{"--set", "image.pullPolicy=always"}, "at '/image/pullPolicy': value must be one of"},
		"image tag as a number":   {[]string{"-f", "testdata/image-tag-number.yaml"}, "at '/image/tag': got number, want string"},
		"image tag 1.10 unquoted": {[]string{"-f", "testdata/image-tag-decimal.yaml"}, "at '/image/tag': got number, want string"},
		"update strategy":         {[]string{"--set", "node.updateStrategy.type=Recreate"}, "at '/node/updateStrategy/type': value must be one of"},
		"root propagation":        {[]string{"--set", "runtime.containerdRootPropagation=Bidirectional"}, "at '/runtime/containerdRootPropagation': value must be one of"},
		"scrape interval":         {[]string{"--set", "metrics.podMonitor.interval=30"}, "at '/metrics/podMonitor/interval'"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, cmd := range [][]string{{"template", "nodegc", chart, "--namespace", "nodegc"}, {"lint", "--strict", chart, "--namespace", "nodegc"}} {
				out, err := helm(t, append(cmd, tc.args...)...)
				msg := string(out)
				if err != nil {
					msg += err.Error()
				}
				if err == nil || !strings.Contains(msg, tc.want) {
					t.Errorf("helm %s %v: %v; want a failure saying %q\n%s", cmd[0], tc.args, err, tc.want, out)
				}
			}
		})
	}
}

// TestChartThresholdOrder: a config whose imageGC.lowThresholdPercent is
// not below its highThresholdPercent (each the agent's default when
// unset) fails the render, naming both, as the agent would refuse it at
// start on every node; the agent's own defaults beside one value of the
// chart's are taken as the agent takes them.
func TestChartThresholdOrder(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string
	}{
		"low above high":             {[]string{"--set", "config.imageGC.lowThresholdPercent=85"}, []string{"lowThresholdPercent 85", "highThresholdPercent 80"}},
		"low equal high":             {[]string{"--set", "config.imageGC.lowThresholdPercent=80"}, []string{"lowThresholdPercent 80", "highThresholdPercent 80"}},
		"high below the chart's low": {[]string{"--set", "config.imageGC.highThresholdPercent=70"}, []string{"lowThresholdPercent 75", "highThresholdPercent 70"}},
		"low above the agent's high": {[]string{"--set", "config.imageGC.highThresholdPercent=null", "--set", "config.imageGC.lowThresholdPercent=90"},
			[]string{"lowThresholdPercent 90", "highThresholdPercent 85", "agent's default"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			renderRefused(t, tc.args, tc.want...)
		})
	}
	cfg := renderedConfig(t, render(t, "nodegc", "--set", "config.imageGC.highThresholdPercent=null", "--set", "config.imageGC.lowThresholdPercent=82"))
	if *cfg.ImageGC.HighThresholdPercent != config.DefaultImageGCHighThresholdPercent || *cfg.ImageGC.LowThresholdPercent != 82 {
		t.Errorf("thresholds %d/%d, want %d/82", *cfg.ImageGC.HighThresholdPercent, *cfg.ImageGC.LowThresholdPercent, config.DefaultImageGCHighThresholdPercent)
	}
}

// TestChartSchemaConfigMatchesType: the schema's config is
// NodeGCConfiguration, field for field and closed (unknown keys refused),
// with each field's JSON type: a field added to the type is refused by
// the chart until the schema has it, and one the schema invented would be
// refused by the agent. Durations carry the pattern Go's durations match.
func TestChartSchemaConfigMatchesType(t *testing.T) {
	root := loadSchema(t)
	cfg := root.Properties["config"]
	if cfg == nil {
		t.Fatal("the schema has no config")
	}
	durationType := reflect.TypeFor[metav1.Duration]()
	var walk func(path string, typ reflect.Type, n *schemaNode)
	walk = func(path string, typ reflect.Type, n *schemaNode) {
		n = root.resolve(n)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		want := map[reflect.Kind]string{reflect.String: "string", reflect.Bool: "boolean", reflect.Int32: "integer",
			reflect.Int64: "integer", reflect.Float32: "number", reflect.Float64: "number", reflect.Map: "object",
			reflect.Slice: "array", reflect.Struct: "object"}[typ.Kind()]
		if typ == durationType {
			want = "string"
			if n.Pattern == "" {
				t.Errorf("config.%s: a duration without a pattern", path)
			}
		}
		if !slices.Contains(n.types(), want) {
			t.Errorf("config.%s: schema types %v, the field's JSON type is %s (%s)", path, n.types(), want, typ)
		}
		if path != "" && !strings.HasSuffix(path, "]") && !strings.Contains(path, "[].") && !slices.Contains(n.types(), "null") {
			t.Errorf("config.%s: schema types %v lack null (null unsets a field: the agent's default)", path, n.types())
		}
		switch {
		case typ == durationType:
		case typ.Kind() == reflect.Struct:
			if !n.closed() {
				t.Errorf("config.%s: the schema lets unknown keys through", path)
			}
			fields := map[string]reflect.Type{}
			collectJSONFields(typ, fields)
			for name, ft := range fields {
				sub := n.Properties[name]
				if sub == nil {
					t.Errorf("config.%s: the schema lacks %s (%s)", path, strings.TrimPrefix(path+"."+name, "."), ft)
					continue
				}
				walk(strings.TrimPrefix(path+"."+name, "."), ft, sub)
			}
			for name := range n.Properties {
				if _, ok := fields[name]; !ok {
					t.Errorf("config.%s: the schema has %s, which NodeGCConfiguration does not", path, name)
				}
			}
		case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct:
			if n.Items == nil {
				t.Errorf("config.%s: a list without items", path)
				return
			}
			walk(path+"[]", typ.Elem(), n.Items)
		}
	}
	walk("", reflect.TypeFor[config.NodeGCConfiguration](), cfg)
}

// collectJSONFields adds the JSON fields of struct typ, inlined ones
// included, to fields.
func collectJSONFields(typ reflect.Type, fields map[string]reflect.Type) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" && f.Anonymous {
			collectJSONFields(f.Type, fields)
			continue
		}
		fields[name] = f.Type
	}
}

// TestChartSchemaCoversValues: every value of values.yaml is in the schema,
// whose objects of the chart's own are closed, so that a misspelt value
// is refused rather than ignored; free-form maps (labels, resources,
// securityContexts) stay open. And the duration pattern matches what Go
// parses as a duration, and not what it refuses.
func TestChartSchemaCoversValues(t *testing.T) {
	root := loadSchema(t)
	data, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	if !root.closed() {
		t.Error("the schema lets unknown top-level values through")
	}
	var walk func(path string, v any, n *schemaNode)
	walk = func(path string, v any, n *schemaNode) {
		n = root.resolve(n)
		m, ok := v.(map[string]any)
		if !ok || len(n.Properties) == 0 {
			return // a leaf, or a free-form map
		}
		if !n.closed() && path != "" {
			t.Errorf("%s: the schema lets unknown keys through", path)
		}
		for k, sub := range m {
			p := strings.TrimPrefix(path+"."+k, ".")
			sn := n.Properties[k]
			if sn == nil {
				t.Errorf("values.yaml's %s is not in the schema", p)
				continue
			}
			walk(p, sub, sn)
		}
	}
	walk("", values, root)

	pattern := regexp.MustCompile(root.Definitions["duration"].Pattern)
	for _, d := range []string{"0", "90s", "2m", "12h45m", "1.5h", "300ms", "-1s", "+5m", ".5s", "1h2m3s4ms5us6ns", "10µs", "7d", "5", "2 m", "1m ", "", "s", "1.s", "m1"} {
		_, err := time.ParseDuration(d)
		if got := pattern.MatchString(d); got != (err == nil) {
			t.Errorf("duration %q: the schema's pattern matches: %v; Go parses it: %v (%v)", d, got, err == nil, err)
		}
	}
}

// TestChartImageTag: a tag that reads as a number renders as written when
// it is a string: quoted in a values file, or given with --set, which
// keeps 1.10 a string (--set-string for one that reads as an integer).
func TestChartImageTag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string
	}{
		"quoted in a values file": {[]string{"-f", "testdata/image-tag-quoted.yaml"}, "ghcr.io/nodegc/nodegc:20240101"},
		"--set 1.10":              {[]string{"--set", "image.tag=1.10"}, "ghcr.io/nodegc/nodegc:1.10"},
		"--set-string 20240101":   {[]string{"--set-string", "image.tag=20240101"}, "ghcr.io/nodegc/nodegc:20240101"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			for _, ref := range []string{"DaemonSet/nodegc-node", "Deployment/nodegc-owner"} {
				kind, objName, _ := strings.Cut(ref, "/")
				o := find(render(t, "nodegc", tc.args...), kind, objName)
				if o == nil {
					t.Fatalf("no %s", ref)
				}
				ctrs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				if img := ctrs[0].(map[string]any)["image"]; img != tc.want {
					t.Errorf("%s image %v, want %s", ref, img, tc.want)
				}
			}
		})
	}
}

// TestChartImageReference: an image.digest the kubelet's reference parser
// refuses (upper-case hex, a cut-short or overlong sha256, an unknown
// algorithm), an image.repository holding a tag or a digest, and an
// image.tag outside [A-Za-z0-9_][A-Za-z0-9_.-]{0,127} fail the render and
// helm lint (the schema's patterns), naming the value: rendered, every pod
// of both workloads would be InvalidImageName. Without the schema (helm
// --skip-schema-validation) the templates refuse the same, the digest's
// message saying lower-case. The valid forms render.
func TestChartImageReference(t *testing.T) {
	hex := func(n int) string { return strings.Repeat("0123456789abcdef", 8)[:n] }
	cases := map[string]struct {
		set  string
		want []string // the template's refusal says these
	}{
		"digest cut short":        {"image.digest=sha256:" + hex(40), []string{"image.digest", "lower-case"}},
		"digest upper case":       {"image.digest=sha256:" + strings.ToUpper(hex(64)), []string{"image.digest", "lower-case"}},
		"digest too long":         {"image.digest=sha256:" + hex(65), []string{"image.digest", "sha256:"}},
		"digest sha384 short":     {"image.digest=sha384:" + hex(64), []string{"image.digest", "sha384"}},
		"digest other algorithm":  {"image.digest=md5:" + hex(32), []string{"image.digest"}},
		"digest not a digest":     {"image.digest=latest", []string{`image.digest "latest"`, "sha256:"}},
		"repository with a tag":   {"image.repository=ghcr.io/nodegc/nodegc:v1", []string{`image.repository "ghcr.io/nodegc/nodegc:v1"`, "image.tag"}},
		"repository with digest":  {"image.repository=ghcr.io/nodegc/nodegc@sha256:" + hex(64), []string{"image.repository", "image.digest"}},
		"tag with a digest":       {"image.tag=v1@sha256:abc", []string{`image.tag "v1@sha256:abc"`}},
		"tag with a colon":        {"image.tag=v1:2", []string{"image.tag"}},
		"tag starting with a dot": {"image.tag=.v1", []string{"image.tag"}},
		"tag too long":            {"image.tag=" + strings.Repeat("a", 129), []string{"image.tag", "128"}},
		"tag empty, no digest":    {"image.tag=", []string{"image.tag"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			field, _, _ := strings.Cut(tc.set, "=")
			for _, cmd := range [][]string{{"template", "nodegc", chart, "--namespace", "nodegc"}, {"lint", "--strict", chart, "--namespace", "nodegc"}} {
				out, err := helm(t, append(cmd, "--set-string", tc.set)...)
				msg := string(out)
				if err != nil {
					msg += err.Error()
				}
				if err == nil || !strings.Contains(msg, strings.ReplaceAll("/"+field, ".", "/")) {
					t.Errorf("helm %s --set-string %s: %v; want a failure naming %s\n%s", cmd[0], tc.set, err, field, out)
				}
			}
			renderRefused(t, []string{"--skip-schema-validation", "--set-string", tc.set}, tc.want...)
		})
	}
	for _, set := range []string{"image.digest=sha256:" + hex(64), "image.digest=sha384:" + hex(96), "image.digest=sha512:" + hex(128),
		"image.repository=localhost:5000/nodegc", "image.tag=v1.2.3_rc-1", "image.tag=" + strings.Repeat("a", 128)} {
		render(t, "nodegc", "--set-string", set)
	}
	// The tag is not used with a digest: empty then.
	render(t, "nodegc", "--set-string", "image.digest=sha256:"+hex(64), "--set-string", "image.tag=")
}
