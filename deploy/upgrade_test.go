package deploy

import (
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodegc/nodegc/pkg/config"
)

// leftRendered are the fields the chart's default configuration renders
// though the agent's default is the same, besides those the chart owns,
// each with its reason.
var leftRendered = map[string]string{
	// Helm merges an operator's evictionHard with the chart's, signal by
	// signal; the agent takes a given map whole. Without it in the
	// values, evictionHard: {nodefs.available: 5%} would drop
	// imagefs.available.
	"imageGC.evictionHard": "an operator's partial evictionHard merges with it",
}

// TestChartDefaultConfigRendersOnlyWhatDiffers: the ConfigMap of a chart
// installed with its defaults holds the fields the chart owns and those
// whose value differs from the agent's default (leftRendered aside), not
// the agent's defaults spelled out. Decoding is strict, so an agent older
// than a field refuses a configuration that sets it, and every node's old
// agent reads the new ConfigMap during an upgrade (a node that kept the
// old image, a rollback of the DaemonSet alone, an agent restarted
// mid-rollout): each crash-looped on imageGC.containerEvents: false, a
// default the chart spelled out.
func TestChartDefaultConfigRendersOnlyWhatDiffers(t *testing.T) {
	cm := find(render(t, "nodegc"), "ConfigMap", "nodegc-config")
	if cm == nil {
		t.Fatal("no ConfigMap nodegc-config")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatal(err)
	}
	defaults := config.Defaulted()
	for path, value := range leaves(doc) {
		if slices.Contains(chartOwnedConfig, path) || leftRendered[path] != "" {
			continue
		}
		one := map[string]any{"apiVersion": doc["apiVersion"], "kind": doc["kind"]}
		setPath(one, path, value)
		raw, err := yaml.Marshal(one)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := config.Decode(raw)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		config.SetDefaults(loaded.Config)
		if reflect.DeepEqual(loaded.Config, defaults) {
			t.Errorf("the chart's default configuration renders %s: %v, the agent's default: leave it out of values.yaml's config "+
				"(a comment may show it), as an agent older than the field refuses a configuration that sets it", path, value)
		}
	}
}

// leaves returns a configuration's fields by path: a section's
// (imageGC.minimumGCAge) and the top level's, a map-valued field (an
// evictionHard) whole.
func leaves(doc map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range doc {
		if k == "apiVersion" || k == "kind" {
			continue
		}
		section, ok := v.(map[string]any)
		if !ok {
			out[k] = v
			continue
		}
		for f, fv := range section {
			out[k+"."+f] = fv
		}
	}
	return out
}

// setPath sets doc's field at a path leaves returned.
func setPath(doc map[string]any, path string, value any) {
	for i := range len(path) {
		if path[i] == '.' {
			doc[path[:i]] = map[string]any{path[i+1:]: value}
			return
		}
	}
	doc[path] = value
}
