package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

const header = "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n"

// TestDecodeProblems checks that each kind of bad input is reported with its
// field path and line, and that every problem of a file is reported at once.
func TestDecodeProblems(t *testing.T) {
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field": {
			yaml: header + "imageGC:\n  highTreshold: 3\n",
			want: []string{"line 4: imageGC.highTreshold: unknown field"},
		},
		"unknown top-level field": {
			yaml: header + "nodeNmae: a\n",
			want: []string{"line 3: nodeNmae: unknown field"},
		},
		// A KubeletConfiguration's field in nodegc's document: nodegc
		// knows which of its own it is. Before: a bare "unknown field".
		"a KubeletConfiguration field": {
			yaml: header + "imageGCHighThresholdPercent: 90\nevictionHard:\n  imagefs.available: 10%\npodLogsDir: /data/pods\ncontainerLogMaxSize: 10Mi\n" +
				"imageGC:\n  imageMinimumGCAge: 5m\n",
			want: []string{
				"line 3: imageGCHighThresholdPercent: unknown field: a KubeletConfiguration field; nodegc's is imageGC.highThresholdPercent " +
					"(or give the kubelet's configuration as a KubeletConfiguration document of its own)",
				"line 4: evictionHard: unknown field: a KubeletConfiguration field; nodegc's is imageGC.evictionHard " +
					"(or give the kubelet's configuration as a KubeletConfiguration document of its own)",
				"line 6: podLogsDir: unknown field: a KubeletConfiguration field; nodegc's is containerGC.podLogsDirectory " +
					"(or give the kubelet's configuration as a KubeletConfiguration document of its own)",
				"line 7: containerLogMaxSize: unknown field: a KubeletConfiguration field, which nodegc does not take",
				"line 9: imageGC.imageMinimumGCAge: unknown field: a KubeletConfiguration field; nodegc's is imageGC.minimumGCAge " +
					"(or give the kubelet's configuration as a KubeletConfiguration document of its own)",
			},
		},
		// A block scalar ends with a newline, a quoted value may hold a
		// space: the agent would make a directory "/var/lib/nodegc\n" or
		// dial "...sock ". Before: valid.
		"white space around a path or an endpoint": {
			yaml: header + "stateDirectory: |\n  /var/lib/nodegc\ncontainerRuntimeEndpoint: \"unix:///run/containerd/containerd.sock \"\n" +
				"containerGC:\n  podLogsDirectory: \"/var/log/pods \"\n",
			want: []string{
				`line 3: stateDirectory: "/var/lib/nodegc\n" has white space around it: remove it (a block scalar, | or >, ends with a newline: write the value on the key's line)`,
				`line 5: containerRuntimeEndpoint: "unix:///run/containerd/containerd.sock " has white space around it: remove it`,
				`line 7: containerGC.podLogsDirectory: "/var/log/pods " has white space around it: remove it`,
			},
		},
		"field names are case-sensitive": {
			yaml: header + "NodeName: a\n",
			want: []string{"line 3: NodeName: unknown field"},
		},
		"wrong type": {
			yaml: header + "imageGC:\n  highThresholdPercent: high\n",
			want: []string{`line 4: imageGC.highThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`},
		},
		// A value of the wrong type says what the field takes.
		"a duration given as a number": {
			yaml: header + "imageGC:\n  minimumGCAge: 120\n",
			want: []string{`line 4: imageGC.minimumGCAge: cannot unmarshal number into a value of type string (want a duration string with a unit, such as "90s", "2m" or "12h45m"; a bare number has none)`},
		},
		"a non-pointer duration given as a number": {
			yaml: header + "runtimeRequestTimeout: 600\n",
			want: []string{`line 3: runtimeRequestTimeout: cannot unmarshal number into a value of type string (want a duration string with a unit, such as "90s", "2m" or "12h45m"; a bare number has none)`},
		},
		"a bind address given as a number": {
			yaml: header + "metricsBindAddress: 10281\nhealthzBindAddress: 10280\n",
			want: []string{
				`line 3: metricsBindAddress: cannot unmarshal number into a value of type string (want a quoted "host:port" or ":port", such as ":10281", or "0" to disable)`,
				`line 4: healthzBindAddress: cannot unmarshal number into a value of type string (want a quoted "host:port" or ":port", such as ":10281", or "0" to disable)`,
			},
		},
		"a percentage with its sign": {
			yaml: header + "imageGC:\n  highThresholdPercent: 85%\n",
			want: []string{`line 4: imageGC.highThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`},
		},
		"a kubelet duration given as a number": {
			yaml: header + "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageMinimumGCAge: 120\n",
			want: []string{`line 6: imageMinimumGCAge: cannot unmarshal number into a value of type string (want a duration string with a unit, such as "90s", "2m" or "12h45m"; a bare number has none)`},
		},
		// The kubelet's healthzBindAddress is an IP address, not nodegc's
		// "host:port": no hint of nodegc's there.
		"a kubelet bind address given as a number": {
			yaml: header + "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzBindAddress: 10\n",
			want: []string{"line 6: healthzBindAddress: cannot unmarshal number into a value of type string"},
		},
		"a string given a number": {
			yaml: header + "nodeName: 10001\nleaderElection:\n  resourceLock: true\n",
			want: []string{
				"line 3: nodeName: cannot unmarshal number into a value of type string (want a string: quote it; unquoted, YAML reads it as a number)",
				"line 5: leaderElection.resourceLock: cannot unmarshal bool into a value of type string (want a string: quote it; unquoted, YAML reads it as a boolean)",
			},
		},
		// YAML 1.2 reads yes, no, on and off as strings; Helm, which reads
		// values as YAML 1.1, as booleans.
		"a boolean given yes or on": {
			yaml: header + "imageGC:\n  dryRun: yes\nownerGC:\n  dryRun: on\n  enableGarbageCollector: 1\n",
			want: []string{
				"line 4: imageGC.dryRun: cannot unmarshal string into a value of type bool (want true or false; yes, no, on and off are strings in YAML 1.2, booleans only in YAML 1.1, as Helm reads values)",
				"line 6: ownerGC.dryRun: cannot unmarshal string into a value of type bool (want true or false; yes, no, on and off are strings in YAML 1.2, booleans only in YAML 1.1, as Helm reads values)",
				"line 7: ownerGC.enableGarbageCollector: cannot unmarshal number into a value of type bool (want true or false)",
			},
		},
		// Each element of a list that fails is named, with its own line.
		"a list of strings given a number and a boolean": {
			yaml: header + "imageGC:\n  exclude:\n  - 123\n  - \"ok\"\n  - true\nownerGC:\n  gcIgnoredResources: [{group: \"\", resource: events}, pods]\n",
			want: []string{
				"line 5: imageGC.exclude[0]: cannot unmarshal number into a value of type string (want a string: quote it; unquoted, YAML reads it as a number)",
				"line 7: imageGC.exclude[2]: cannot unmarshal bool into a value of type string (want a string: quote it; unquoted, YAML reads it as a boolean)",
				"line 9: ownerGC.gcIgnoredResources[1]: cannot unmarshal string into a value of type config.GroupResource",
			},
		},
		// A list given one element alone says to write a list.
		"a list given a string, a mapping and a number": {
			yaml: header + "imageGC:\n  exclude: nginx\nownerGC:\n  gcIgnoredResources: {group: apps, resource: deployments}\n" +
				"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: 10\n",
			want: []string{
				`line 4: imageGC.exclude: cannot unmarshal string into a value of type []string (want a list: write ["nginx"] or one "- nginx" per line)`,
				`line 6: ownerGC.gcIgnoredResources: cannot unmarshal object into a value of type []config.GroupResource (want a list: write [{...}], or "- " before each entry, one per line)`,
				`line 10: clusterDNS: cannot unmarshal number into a value of type []string (want a list: write [...], or "- " before each entry, one per line)`,
			},
		},
		"an eviction threshold given a number": {
			yaml: header + "imageGC:\n  evictionHard:\n    imagefs.available: 15\n  evictionSoft:\n    nodefs.available: 10\n" +
				"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  imagefs.available: 15\n",
			want: []string{
				`line 5: imageGC.evictionHard[imagefs.available]: cannot unmarshal number into a value of type string (want a quoted percentage such as "15%" or a quantity such as "10Gi")`,
				`line 7: imageGC.evictionSoft[nodefs.available]: cannot unmarshal number into a value of type string (want a quoted percentage such as "15%" or a quantity such as "10Gi")`,
				`line 12: evictionHard[imagefs.available]: cannot unmarshal number into a value of type string (want a quoted percentage such as "15%" or a quantity such as "10Gi")`,
			},
		},
		// Quotes (Helm's quote) make a string of a boolean or a number:
		// the hint says to remove them, not what else the field takes.
		// Before: the yes/on hint, and `without "%"`.
		"a boolean or a number quoted": {
			yaml: header + "imageGC:\n  dryRun: \"true\"\n  highThresholdPercent: \"90\"\ncontainerGC:\n  maxContainers: '5'\n" +
				"ownerGC:\n  dryRun: \"False\"\n",
			want: []string{
				`line 4: imageGC.dryRun: cannot unmarshal string into a value of type bool (want true or false: unquote it; "true" is a string)`,
				`line 5: imageGC.highThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100: unquote it; "90" is a string)`,
				`line 7: containerGC.maxContainers: cannot unmarshal string into a value of type int32 (want a number: unquote it; "5" is a string)`,
				`line 9: ownerGC.dryRun: cannot unmarshal string into a value of type bool (want true or false: unquote it; "False" is a string)`,
			},
		},
		"other fields of the wrong type get no hint": {
			yaml: header + "containerGC:\n  maxContainers: many\n",
			want: []string{"line 4: containerGC.maxContainers: cannot unmarshal string into a value of type int32"},
		},
		// YAML 1.1, which the kubelet and Helm read, takes a leading 0
		// as octal; go.yaml.in/yaml/v3 does too: 070 would be 56.
		"a leading 0": {
			yaml: header + "imageGC:\n  highThresholdPercent: 070\n  lowThresholdPercent: 065\n" +
				"containerGC:\n  maxContainers: -010\n  maxPerPodContainer: 07\nownerGC:\n  kubeAPIQPS: 010\n",
			want: []string{
				"line 4: imageGC.highThresholdPercent: 070: a leading 0 is read as octal (56); write 70 (or 56)",
				"line 5: imageGC.lowThresholdPercent: 065: a leading 0 is read as octal (53); write 65 (or 53)",
				"line 7: containerGC.maxContainers: -010: a leading 0 is read as octal (-8); write -10 (or -8)",
				"line 8: containerGC.maxPerPodContainer: 07: a leading 0 is read as octal (7); write 7",
				"line 10: ownerGC.kubeAPIQPS: 010: a leading 0 is read as octal (8); write 10 (or 8)",
			},
		},
		// go.yaml.in/yaml/v3 drops the _ before reading the number:
		// 0_60 is 060, octal 48. Before, it passed as 48.
		"a leading 0 with underscores": {
			yaml: header + "imageGC:\n  highThresholdPercent: 0_90\n  lowThresholdPercent: 0_60\ncontainerGC:\n  maxContainers: -0_1_0\n" +
				"  maxPerPodContainer: 0x_5\nownerGC:\n  concurrentGCSyncs: 2_0\n",
			want: []string{
				"line 4: imageGC.highThresholdPercent: 0_90: a leading 0 is read as octal where the digits allow it (070 is 56); write 90",
				"line 5: imageGC.lowThresholdPercent: 0_60: a leading 0 is read as octal (48); write 60 (or 48)",
				"line 7: containerGC.maxContainers: -0_1_0: a leading 0 is read as octal (-8); write -10 (or -8)",
				"line 8: containerGC.maxPerPodContainer: 0x_5: a hexadecimal number (5); write 5",
			},
		},
		"a leading 0 before digits that are not octal": {
			yaml: header + "imageGC:\n  highThresholdPercent: 090\n",
			want: []string{"line 4: imageGC.highThresholdPercent: 090: a leading 0 is read as octal where the digits allow it (070 is 56); write 90"},
		},
		// The rule between the thresholds would quote 56, which the file
		// does not say.
		"a leading 0 is not weighed by the rules": {
			yaml: header + "imageGC:\n  highThresholdPercent: 070\n  lowThresholdPercent: 65\n",
			want: []string{"line 4: imageGC.highThresholdPercent: 070: a leading 0 is read as octal (56); write 70 (or 56)"},
		},
		"a number in another base": {
			yaml: header + "imageGC:\n  highThresholdPercent: 0x55\n  lowThresholdPercent: 0o70\ncontainerGC:\n  maxContainers: 0b101\n",
			want: []string{
				"line 4: imageGC.highThresholdPercent: 0x55: a hexadecimal number (85); write 85",
				"line 5: imageGC.lowThresholdPercent: 0o70: an octal number (56); write 56",
				"line 7: containerGC.maxContainers: 0b101: a binary number (5); write 5",
			},
		},
		"bad duration": {
			yaml: header + "containerGC:\n  period: soon\n",
			want: []string{`line 4: containerGC.period: time: invalid duration "soon" (want a duration such as "90s", "2m" or "12h45m")`},
		},
		"duplicate key": {
			yaml: header + "imageGC:\n  period: 1m\n  period: 2m\n",
			want: []string{"line 5: imageGC.period: duplicate key (first set at line 4)"},
		},
		"every problem at once, in line order": {
			yaml: header + "imageGC:\n  lowThresholdPercent: x\n  bogus: 1\n  period: 1m\n  period: 2m\n" +
				"containerGC:\n  maxContainers: 1.5\n",
			want: []string{
				`line 4: imageGC.lowThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`,
				"line 5: imageGC.bogus: unknown field",
				"line 7: imageGC.period: duplicate key (first set at line 6)",
				"line 9: containerGC.maxContainers: cannot unmarshal number 1.5 into a value of type int32",
			},
		},
		"unknown field in a list item": {
			yaml: header + "ownerGC:\n  gcIgnoredResources:\n  - resource: events\n    grup: x\n",
			want: []string{"line 6: ownerGC.gcIgnoredResources[0].grup: unknown field"},
		},
		"not a mapping": {
			yaml: "- a\n- b\n",
			want: []string{"line 1: a configuration document must be a mapping"},
		},
		"wrong kind": {
			yaml: "apiVersion: v1\nkind: ConfigMap\n",
			want: []string{`line 1: unsupported document apiVersion "v1" kind "ConfigMap": want apiVersion "nodegc.io/v1alpha1" kind "NodeGCConfiguration", or apiVersion "kubelet.config.k8s.io/v1beta1" kind "KubeletConfiguration"`},
		},
		"no document": {
			yaml: "# nothing\n---\n",
			want: []string{`no configuration document found: want apiVersion "nodegc.io/v1alpha1" kind "NodeGCConfiguration"`},
		},
		"two nodegc documents": {
			yaml: header + "---\n" + header,
			want: []string{"line 4: a second NodeGCConfiguration document (the first is at line 1); give one"},
		},
		"merge keys": {
			yaml: header + "base: &b {period: 1m}\nimageGC:\n  <<: *b\n",
			want: []string{"line 5: imageGC: YAML merge keys (<<) are not supported", "line 3: base: unknown field"},
		},
		"kubelet document with a wrong type": {
			yaml: header + "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: lots\n",
			want: []string{`line 6: imageGCHighThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`},
		},
		// cat nodegc.yaml kubelet-config.yaml, the second saved with a
		// byte order mark: allowed at the start of the file only. Before:
		// "unsupported document apiVersion \"\"".
		"a byte order mark at the start of a later document": {
			yaml: header + "---\n\ufeffapiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 100\n",
			want: []string{`line 4: a byte order mark (U+FEFF) before "apiVersion": remove it (it is allowed only at the start of the file)`},
		},
		"a byte order mark at the start of a later nodegc document": {
			yaml: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n---\n\ufeff" + header + "imageGC:\n  perod: 1m\n",
			want: []string{
				`line 4: a byte order mark (U+FEFF) before "apiVersion": remove it (it is allowed only at the start of the file)`,
				"line 7: imageGC.perod: unknown field",
			},
		},
		"a byte order mark before a comment of a later document": {
			yaml: header + "---\n\ufeff# the kubelet's\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
			want: []string{
				"line 4: a byte order mark (U+FEFF): remove it (it is allowed only at the start of the file)",
				"invalid YAML: line 5: mapping values are not allowed in this context",
			},
		},
		"invalid yaml": {
			yaml: header + "imageGC: [\n",
			want: []string{"invalid YAML: line 3: did not find expected node content"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.yaml))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode() error = %v, want a *DecodeError", err)
			}
			got := de.Problems
			if name == "merge keys" {
				// Order of problems from two sources on different lines.
				got = slices.Sorted(slices.Values(got))
				tc.want = slices.Sorted(slices.Values(tc.want))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeKeepsExplicitZeroes(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  minimumGCAge: 0s\n  lowThresholdPercent: 0\n" +
		"containerGC:\n  maxPerPodContainer: 0\nownerGC:\n  enableGarbageCollector: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	if got := c.ImageGC.MinimumGCAge.Duration; got != 0 {
		t.Errorf("minimumGCAge = %v, want 0 (set explicitly)", got)
	}
	if got := *c.ImageGC.LowThresholdPercent; got != 0 {
		t.Errorf("lowThresholdPercent = %d, want 0", got)
	}
	if got := *c.ContainerGC.MaxPerPodContainer; got != 0 {
		t.Errorf("maxPerPodContainer = %d, want 0", got)
	}
	if *c.OwnerGC.EnableGarbageCollector {
		t.Error("enableGarbageCollector = true, want false (set explicitly)")
	}
	if got := *c.ImageGC.HighThresholdPercent; got != DefaultImageGCHighThresholdPercent {
		t.Errorf("highThresholdPercent = %d, want the default %d", got, DefaultImageGCHighThresholdPercent)
	}
}

// TestKubeletPrecedence: nodegc document > KubeletConfiguration > defaults.
func TestKubeletPrecedence(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 60\nimageMinimumGCAge: 10m\n" +
		"imageMaximumGCAge: 72h\ncontainerRuntimeEndpoint: unix:///run/crio/crio.sock\n" +
		"imageServiceEndpoint: unix:///run/images.sock\npodLogsDir: /data/pod-logs\nruntimeRequestTimeout: 10m\n"
	nodegc := header + "imageGC:\n  highThresholdPercent: 75\ncontainerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"

	for name, doc := range map[string]string{
		"kubelet first": kubelet + "---\n" + nodegc,
		"nodegc first":  nodegc + "---\n" + kubelet,
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			c := loaded.Config
			got := map[string]any{
				"high":     *c.ImageGC.HighThresholdPercent,
				"low":      *c.ImageGC.LowThresholdPercent,
				"minAge":   c.ImageGC.MinimumGCAge.Duration,
				"maxAge":   c.ImageGC.MaximumGCAge.Duration,
				"runtime":  c.ContainerRuntimeEndpoint,
				"images":   c.ImageServiceEndpoint,
				"podLogs":  c.ContainerGC.PodLogsDirectory,
				"timeout":  c.RuntimeRequestTimeout.Duration,
				"period":   c.ImageGC.Period.Duration,
				"fromKubl": strings.Join(loaded.FromKubelet, ","),
			}
			want := map[string]any{
				"high":    int32(75), // nodegc wins
				"low":     int32(60), // from kubelet
				"minAge":  10 * time.Minute,
				"maxAge":  72 * time.Hour,
				"runtime": "unix:///run/containerd/containerd.sock", // nodegc wins
				"images":  "unix:///run/images.sock",
				"podLogs": "/data/pod-logs",
				"timeout": 10 * time.Minute,     // the kubelet's deadline for a container's start too
				"period":  DefaultImageGCPeriod, // neither: default
				"fromKubl": "imageGC.lowThresholdPercent,imageGC.minimumGCAge,imageGC.maximumGCAge," +
					"imageServiceEndpoint,containerGC.podLogsDirectory,runtimeRequestTimeout",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("merged config (-want +got):\n%s", diff)
			}
			if errs := Validate(c); len(errs) > 0 {
				t.Errorf("merged config invalid: %v", errs)
			}
		})
	}
}

// TestHiddenKubeletValuesWarned: a value of the NodeGCConfiguration
// document wins over the KubeletConfiguration's same field, as documented;
// where the two differ, a warning at nodegc's line names the kubelet's
// value and line. Before, nodegc config defaults with the node's kubelet
// config appended (what the README suggests) ran with nodegc's defaults
// for every such field (the default socket, /var/log/pods, 2m where the
// kubelet keeps images 10m, 15%/10% where it evicts at 5%), and config
// validate said "valid" (review config r10 F7). A field both give alike,
// the image thresholds of a kubelet whose image GC is off (not taken), and
// a field only one document gives say nothing.
func TestHiddenKubeletValuesWarned(t *testing.T) {
	defaults, err := Marshal(Defaulted())
	if err != nil {
		t.Fatal(err)
	}
	kubelet := "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\npodLogsDir: /data/pods\n" +
		"imageGCHighThresholdPercent: 100\nimageMinimumGCAge: 10m\nruntimeRequestTimeout: 2m\n" +
		"evictionHard:\n  imagefs.available: 5%\n  nodefs.available: 5%\n"
	doc := string(defaults) + kubelet
	loaded, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// lineOf returns the line of the first (or, with last, the last) line
	// that begins with text.
	lineOf := func(text string, last bool) int {
		found := 0
		for i, l := range strings.Split(doc, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), text) {
				found = i + 1
				if !last {
					break
				}
			}
		}
		if found == 0 {
			t.Fatalf("no line %q", text)
		}
		return found
	}
	var hidden []string
	for _, w := range loaded.Warnings {
		if strings.Contains(w, "hides the KubeletConfiguration's") && !strings.Contains(w, "imageServiceEndpoint") {
			hidden = append(hidden, w)
		}
	}
	want := []string{
		fmt.Sprintf(`line %d: containerRuntimeEndpoint "unix:///run/containerd/containerd.sock" hides the KubeletConfiguration's `+
			`containerRuntimeEndpoint "unix:///run/k3s/containerd/containerd.sock" (line %d): remove the line (or write null) to take the kubelet's`,
			lineOf("containerRuntimeEndpoint: unix:///run/containerd", false), lineOf("containerRuntimeEndpoint: unix:///run/k3s", false)),
		fmt.Sprintf(`line %d: imageGC.minimumGCAge "2m0s" hides the KubeletConfiguration's imageMinimumGCAge "10m0s" (line %d): `+
			`remove the line (or write null) to take the kubelet's`, lineOf("minimumGCAge:", false), lineOf("imageMinimumGCAge:", false)),
		fmt.Sprintf(`line %d: imageGC.evictionHard {"imagefs.available":"15%%","nodefs.available":"10%%"} hides the KubeletConfiguration's `+
			`evictionHard {"imagefs.available":"5%%","nodefs.available":"5%%"} (line %d): remove the line (or write null) to take the kubelet's`,
			lineOf("evictionHard:", false), lineOf("evictionHard:", true)),
		fmt.Sprintf(`line %d: containerGC.podLogsDirectory "/var/log/pods" hides the KubeletConfiguration's podLogsDir "/data/pods" (line %d): `+
			`remove the line (or write null) to take the kubelet's`, lineOf("podLogsDirectory:", false), lineOf("podLogsDir:", false)),
	}
	sortProblems(want)
	if diff := cmp.Diff(want, hidden); diff != "" {
		t.Errorf("warnings of hidden kubelet values (-want +got):\n%s\nall warnings: %q", diff, loaded.Warnings)
	}
}

// TestHiddenKubeletValuesAlikeNotWarned: values nodegc reads alike,
// written otherwise, hide nothing (review diff14 D14-1): eviction
// thresholds on signals nodegc does not read (memory.available, inodes),
// 15.0% for 15%, 0% and 100% (off), a path with a trailing slash, an
// endpoint without its unix:// scheme, a kubelet's runtimeRequestTimeout
// over nodegc's ceiling beside nodegc's own at the ceiling; 0% and 0.0%
// (off) beside a kubelet that evicts on no disk signal (review diff15
// G15-3).
func TestHiddenKubeletValuesAlikeNotWarned(t *testing.T) {
	off := header + "imageGC:\n  evictionHard:\n    imagefs.available: 0%\n    nodefs.available: 0.0%\n" +
		"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: 100Mi\n"
	alike := header + "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nruntimeRequestTimeout: 24h\n" +
		"imageGC:\n  evictionHard:\n    imagefs.available: 15%\n    nodefs.available: 10%\n" +
		"  evictionSoft:\n    imagefs.available: 0%\n" +
		"containerGC:\n  podLogsDirectory: /var/log/pods\n" +
		"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"containerRuntimeEndpoint: /run/containerd/containerd.sock\nruntimeRequestTimeout: 48h\npodLogsDir: /var/log/pods/\n" +
		"evictionHard:\n  memory.available: 100Mi\n  nodefs.inodesFree: 5%\n  imagefs.available: 15.0%\n  nodefs.available: 10%\n" +
		"evictionSoft:\n  imagefs.available: 100%\n  memory.available: 200Mi\n"
	for _, doc := range []string{alike, off} {
		loaded, err := Decode([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range loaded.Warnings {
			if strings.Contains(w, "hides the KubeletConfiguration's") {
				t.Errorf("warning %q: the two documents give nodegc the same value", w)
			}
		}
	}
}

// TestKubeletRuntimeRequestTimeoutOverTheCeiling: the kubelet sets no
// ceiling on runtimeRequestTimeout; one over nodegc's (24h) taken from the
// KubeletConfiguration is taken as 24h, with a warning naming its line,
// rather than stopping the agent (the node would get no GC). In nodegc's
// own document the ceiling is a problem (TestRuntimeRequestTimeoutCeiling).
func TestKubeletRuntimeRequestTimeoutOverTheCeiling(t *testing.T) {
	doc := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nruntimeRequestTimeout: 48h\n---\n" + header
	loaded, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Config.RuntimeRequestTimeout.Duration; got != MaxRuntimeRequestTimeout {
		t.Errorf("runtimeRequestTimeout = %v, want %v", got, MaxRuntimeRequestTimeout)
	}
	if errs := Validate(loaded.Config); len(errs) > 0 {
		t.Errorf("merged config invalid: %v", errs.ToAggregate())
	}
	if want := "line 3: runtimeRequestTimeout 48h0m0s of the KubeletConfiguration is over nodegc's ceiling"; !slices.ContainsFunc(loaded.Warnings, func(w string) bool { return strings.Contains(w, want) }) {
		t.Errorf("warnings %q; want one saying %q", loaded.Warnings, want)
	}
}

// TestNullIsUnset: a field written as null (or ~) is not set, as both the
// kubelet and Kubernetes' YAML decoding read it: in the nodegc document it
// leaves the field to the KubeletConfiguration, and in the
// KubeletConfiguration it gives nothing to take (the default applies).
func TestNullIsUnset(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  highThresholdPercent: null\n  evictionHard: ~\n  maximumGCAge: 1h\n" +
		"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: null\nevictionHard:\n  imagefs.available: 20%\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	got := map[string]any{
		"high":     *c.ImageGC.HighThresholdPercent,
		"low":      *c.ImageGC.LowThresholdPercent,
		"eviction": c.ImageGC.EvictionHard["imagefs.available"],
		"maxAge":   c.ImageGC.MaximumGCAge.Duration,
		"fromKubl": strings.Join(loaded.FromKubelet, ","),
	}
	want := map[string]any{
		"high":     int32(90), // null in nodegc's document: the kubelet's
		"low":      int32(DefaultImageGCLowThresholdPercent),
		"eviction": "20%",
		"maxAge":   time.Hour,
		"fromKubl": "imageGC.highThresholdPercent,imageGC.evictionHard",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged config (-want +got):\n%s", diff)
	}
}

// TestEndpointsAsTheKubeletReadsThem: a KubeletConfiguration the kubelet
// accepts is accepted: containerRuntimeEndpoint written as unix:/path or as
// a bare path (which the kubelet reads as unix:///path). The bare path is a
// warning naming its line and where it came from, and how to write it.
func TestEndpointsAsTheKubeletReadsThem(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"containerRuntimeEndpoint: /run/containerd/containerd.sock\nimageServiceEndpoint: unix:/run/images.sock\n"
	loaded, err := Decode([]byte(kubelet))
	if err != nil {
		t.Fatal(err)
	}
	if errs := Validate(loaded.Config); len(errs) > 0 {
		t.Fatalf("Validate() = %v; the kubelet accepts these endpoints", errs)
	}
	want := []string{`line 3: containerRuntimeEndpoint: "/run/containerd/containerd.sock" is a bare path, ` +
		`which the kubelet reads as unix:///run/containerd/containerd.sock and its CRI client calls deprecated; ` +
		`write unix:///run/containerd/containerd.sock (value from the KubeletConfiguration document)`}
	if diff := cmp.Diff(want, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}

	loaded, err = Decode([]byte(header + "imageServiceEndpoint: /run/images.sock\n"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := Validate(loaded.Config); len(errs) > 0 {
		t.Fatalf("Validate() = %v", errs)
	}
	want = []string{`line 3: imageServiceEndpoint: "/run/images.sock" is a bare path, ` +
		`which the kubelet reads as unix:///run/images.sock and its CRI client calls deprecated; write unix:///run/images.sock`}
	if diff := cmp.Diff(want, loaded.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestKubeletOnlyDocument(t *testing.T) {
	loaded, err := Decode([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\nsomeFutureField: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := Validate(loaded.Config); len(errs) > 0 {
		t.Fatalf("Validate() = %v", errs)
	}
	want := []string{ // in line order (TestWarningsInLineOrder)
		"line 3: imageGCHighThresholdPercent of the KubeletConfiguration is 100, its image GC off: its thresholds are not taken, " +
			"and nodegc's image GC runs at highThresholdPercent 85, lowThresholdPercent 80 (set both in the NodeGCConfiguration document to choose)",
		"line 5: someFutureField: unknown field (ignored in the KubeletConfiguration document)",
	}
	if diff := cmp.Diff(want, loaded.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if slices.Contains(loaded.FromKubelet, "imageGC.highThresholdPercent") || slices.Contains(loaded.FromKubelet, "imageGC.lowThresholdPercent") {
		t.Errorf("thresholds taken from a kubelet whose image GC is off: %v", loaded.FromKubelet)
	}
}

// TestBesideAKubeletWhoseImageGCIsOff: the node's KubeletConfiguration,
// whose image GC is off as "Running beside kubelet" says (high 100, low
// 99), given to nodegc with none, one or both of its thresholds set: the
// kubelet's are never taken, so nodegc's image GC runs, and a high
// threshold alone is valid (the kubelet's low 99 would be over it).
func TestBesideAKubeletWhoseImageGCIsOff(t *testing.T) {
	kubelet := "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\nimageMaximumGCAge: 0s\n"
	for _, tc := range []struct {
		name, nodegc string
		high, low    int32
		warns        bool
		invalid      bool // Validate names imageGC.lowThresholdPercent
	}{
		{name: "neither", high: 85, low: 80, warns: true},
		{name: "high alone", nodegc: "imageGC:\n  highThresholdPercent: 90\n", high: 90, low: 80, warns: true},
		{name: "both", nodegc: "imageGC:\n  highThresholdPercent: 70\n  lowThresholdPercent: 60\n", high: 70, low: 60},
		{name: "low alone", nodegc: "imageGC:\n  lowThresholdPercent: 70\n", high: 85, low: 70, warns: true},
		{name: "low alone over the default high", nodegc: "imageGC:\n  lowThresholdPercent: 90\n", invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loaded, err := Decode([]byte(header + tc.nodegc + kubelet))
			if err != nil {
				t.Fatal(err)
			}
			errs := Validate(loaded.Config)
			if tc.invalid {
				if len(errs) != 1 || errs[0].Field != "imageGC.lowThresholdPercent" {
					t.Errorf("Validate() = %v, want one problem of imageGC.lowThresholdPercent", errs)
				}
				if slices.ContainsFunc(loaded.Warnings, func(w string) bool { return strings.Contains(w, "its image GC off") }) {
					t.Errorf("a warning says what thresholds nodegc runs at, but they are invalid: %q", loaded.Warnings)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("Validate() = %v", errs)
			}
			gc := loaded.Config.ImageGC
			if *gc.HighThresholdPercent != tc.high || *gc.LowThresholdPercent != tc.low {
				t.Errorf("thresholds %d/%d, want %d/%d", *gc.HighThresholdPercent, *gc.LowThresholdPercent, tc.high, tc.low)
			}
			if warned := slices.ContainsFunc(loaded.Warnings, func(w string) bool { return strings.Contains(w, "its image GC off") }); warned != tc.warns {
				t.Errorf("warned %v, want %v: %q", warned, tc.warns, loaded.Warnings)
			}
		})
	}
}

func TestLineOfValidationPaths(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  exclude:\n  - a\n  - 'b['\n"))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]int{
		"imageGC.exclude[1]":             6,
		"imageGC":                        3,
		"imageGC.period":                 3, // not in the file: its closest parent
		"containerGC.podLogsDirectory":   0,
		"ownerGC.gcIgnoredResources[0]":  0,
		"imageGC.exclude[1].nonexistent": 6,
	} {
		if got := loaded.Line(path); got != want {
			t.Errorf("Line(%q) = %d, want %d", path, got, want)
		}
	}
}

func TestAliasBombIsRefused(t *testing.T) {
	bomb := header + "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		bomb += name + ": &" + name + " [*" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev +
			", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + ", *" + prev + "]\n"
		prev = name
	}
	_, err := Decode([]byte(bomb))
	if err == nil || !strings.Contains(err.Error(), "more than 100000 YAML nodes") {
		t.Fatalf("Decode(alias bomb) error = %v, want the node limit", err)
	}
}

func TestDefaultsGolden(t *testing.T) {
	got, err := Marshal(Defaulted())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "defaults.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/config -run TestDefaultsGolden -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("Marshal(Defaulted()) differs from %s (-want +got):\n%s", golden, diff)
	}
}

// TestRoundTrip: what `config defaults` prints decodes back to the same
// configuration, and so does a configuration with every field set.
func TestRoundTrip(t *testing.T) {
	full := Defaulted()
	full.NodeName = "node-1"
	full.ImageServiceEndpoint = "unix:///run/images.sock"
	full.ImageGC.Exclude = []string{"registry.k8s.io/*"}
	full.ImageGC.MaximumGCAge = &metav1.Duration{Duration: 48 * time.Hour}
	full.ContainerGC.MinAgeFrom = AgeFromExit
	full.ContainerGC.MaxContainers = ptr.To[int32](100)
	full.ImageGC.ContainerEvents = true
	full.OwnerGC.DryRun = true
	for name, c := range map[string]*NodeGCConfiguration{"defaults": Defaulted(), "full": full} {
		t.Run(name, func(t *testing.T) {
			data, err := Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := Decode(data)
			if err != nil {
				t.Fatalf("Decode(Marshal(c)): %v\n%s", err, data)
			}
			if diff := cmp.Diff(c, loaded.Config); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate() = %v", errs)
			}
		})
	}
}

func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example files, want at least nodegc.yaml and kubelet-config.yaml", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			loaded, err := LoadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate(%s) = %v", f, errs)
			}
			if len(loaded.Warnings) > 0 {
				t.Errorf("warnings for %s: %v", f, loaded.Warnings)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadFile(missing) error = %v, want os.ErrNotExist", err)
	}
}

func TestDecodeTooLarge(t *testing.T) {
	_, err := Decode(make([]byte, MaxFileSize+1))
	if err == nil {
		t.Fatal("Decode(too large) succeeded")
	}
}

// FuzzDecode: Decode must never panic, and whatever it accepts must survive
// defaulting, validation and a round trip when valid.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		header,
		header + "imageGC:\n  highThresholdPercent: 90\n  exclude: ['a/*']\n",
		header + "imageGC:\n  period: 1m\n  period: 2m\n",
		header + "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 90\n",
		header + "a: &a [1]\nb: *a\n",
		"- 1\n",
		"{",
		header + "ownerGC:\n  gcIgnoredResources: [{group: '', resource: events}]\n",
		header + "imageGC:\n  highThresholdPercnt: 80\n  lowThresholdPercent: 120\ncontainerGC:\n  maxPerPodContainer: 0\n  period: banana\n",
	} {
		f.Add([]byte(seed))
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "examples", "nodegc.yaml")); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		loaded, err := Decode(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("error with an empty message")
			}
			var de *DecodeError
			if errors.As(err, &de) && !slices.IsSortedFunc(de.Problems, func(a, b string) int { return sortLine(a) - sortLine(b) }) {
				t.Fatalf("problems not in line order:\n%s", err)
			}
			return
		}
		if errs := Validate(loaded.Config); len(errs) > 0 {
			return
		}
		out, err := Marshal(loaded.Config)
		if err != nil {
			t.Fatalf("Marshal(valid config): %v", err)
		}
		again, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode(Marshal(valid config)): %v\n%s", err, out)
		}
		if diff := cmp.Diff(loaded.Config, again.Config); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// TestContainerEvents: imageGC.containerEvents is off unless the nodegc
// document turns it on (the kubelet has no such field: a KubeletConfiguration
// document, even with its evented PLEG on, leaves it off), and a value that
// is not a YAML boolean is refused with its line.
func TestContainerEvents(t *testing.T) {
	if Defaulted().ImageGC.ContainerEvents {
		t.Error("Defaulted().ImageGC.ContainerEvents = true, want false: a stopped nodegc would stall containerd 2.x's container lifecycle")
	}
	kubelet := "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  EventedPLEG: true\n"
	for name, tc := range map[string]struct {
		yaml string
		want bool
	}{
		"unset":                  {header, false},
		"unset beside a kubelet": {header + kubelet, false},
		"off":                    {header + "imageGC:\n  containerEvents: false\n", false},
		"on":                     {header + "imageGC:\n  containerEvents: true\n", true},
		"on beside a kubelet":    {header + "imageGC:\n  containerEvents: true\n" + kubelet, true},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := loaded.Config.ImageGC.ContainerEvents; got != tc.want {
				t.Errorf("imageGC.containerEvents = %t, want %t", got, tc.want)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate() = %v", errs)
			}
		})
	}
	_, err := Decode([]byte(header + "imageGC:\n  containerEvents: yes\n"))
	var de *DecodeError
	if !errors.As(err, &de) || !slices.Equal(de.Problems, []string{"line 4: imageGC.containerEvents: cannot unmarshal string into a value of type bool " +
		"(want true or false; yes, no, on and off are strings in YAML 1.2, booleans only in YAML 1.1, as Helm reads values)"}) {
		t.Errorf("containerEvents: yes: Decode() error = %v, want the line and a type error", err)
	}
}

// TestInodeSignalsWarn: an evictionHard inodesFree signal, in nodegc's
// document or the KubeletConfiguration's, is a warning at load: nodegc's
// image GC frees bytes, as the kubelet's image GC does, and does not keep
// inodes free. Turned off ("0%"), or absent, it is silent.
func TestInodeSignalsWarn(t *testing.T) {
	const kubelet = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"nodegc's": {doc: header + "imageGC:\n  evictionHard:\n    imagefs.available: 15%\n    imagefs.inodesFree: 5%\n",
			want: []string{"line 6: imageGC.evictionHard[imagefs.inodesFree]: 5% is a signal on inodes; nodegc's image GC frees bytes, not inodes, as the kubelet's image GC does (the kubelet's eviction manager removes unused images itself when inodes run short)"}},
		"the kubelet's": {doc: kubelet + "evictionHard:\n  nodefs.inodesFree: 10%\n  nodefs.available: 10%\n",
			want: []string{"line 4: imageGC.evictionHard[nodefs.inodesFree]: 10% is a signal on inodes; nodegc's image GC frees bytes, not inodes, as the kubelet's image GC does (the kubelet's eviction manager removes unused images itself when inodes run short) (value from the KubeletConfiguration document)"}},
		"off":     {doc: header + "imageGC:\n  evictionHard:\n    imagefs.inodesFree: 0%\n"},
		"default": {doc: header},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodegcFieldInKubeletDocument: a field whose name is a top-level field
// of the NodeGCConfiguration (imageGC, containerGC, nodeName, ...) and that
// the KubeletConfiguration does not have is an error in the
// KubeletConfiguration document, naming the field, the document it is in
// and the one it belongs in: no kubelet has such a field, and ignoring it
// would drop an operator's exclusions, minimum age or container limits (a
// section appended to the end of a file whose last document is the
// kubelet's). Other unknown fields of the kubelet document stay warnings
// (a newer kubelet's), nested ones included, and a kubelet field nodegc
// also has (enableProfilingHandler) is the kubelet's own.
func TestNodegcFieldInKubeletDocument(t *testing.T) {
	const kubelet = "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for name, tc := range map[string]struct {
		doc      string
		problems []string
		warnings []string
	}{
		"sections appended to the kubelet document": {
			doc: header + kubelet + "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n" +
				"imageGC:\n  exclude: [\"registry.example/critical/*\"]\n  minimumGCAge: 24h\n" +
				"containerGC:\n  maxPerPodContainer: 5\n",
			problems: []string{
				"line 8: imageGC: a NodeGCConfiguration field, in the KubeletConfiguration document (line 4), which has no such field: " +
					"nodegc would ignore it there; it belongs in the NodeGCConfiguration document (line 1)",
				"line 11: containerGC: a NodeGCConfiguration field, in the KubeletConfiguration document (line 4), which has no such field: " +
					"nodegc would ignore it there; it belongs in the NodeGCConfiguration document (line 1)",
			},
		},
		"a kubelet document alone": {
			doc: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeName: worker-1\n",
			problems: []string{
				"line 3: nodeName: a NodeGCConfiguration field, in the KubeletConfiguration document (line 1), which has no such field: " +
					"nodegc would ignore it there; it belongs in a NodeGCConfiguration document (apiVersion: nodegc.io/v1alpha1, kind: NodeGCConfiguration)",
			},
		},
		// The fields of nodegc's sections, written flat (the imageGC:
		// line lost in a paste): no kubelet has them either, and the
		// exclusions would be dropped. Before, a warning each.
		"section fields at the top of a kubelet document alone": {
			doc: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimageGCHighThresholdPercent: 100\nimageMaximumGCAge: 0s\n" +
				"# nodegc\nexclude:\n- registry.example.com/critical/**\nkeepNewestPerRepository: 2\n",
			problems: []string{
				"line 6: exclude: the field imageGC.exclude of a NodeGCConfiguration, in the KubeletConfiguration document (line 1), which has no such field: " +
					"nodegc would ignore it there; it belongs under imageGC in a NodeGCConfiguration document (apiVersion: nodegc.io/v1alpha1, kind: NodeGCConfiguration)",
				"line 8: keepNewestPerRepository: the field imageGC.keepNewestPerRepository of a NodeGCConfiguration, in the KubeletConfiguration document (line 1), which has no such field: " +
					"nodegc would ignore it there; it belongs under imageGC in a NodeGCConfiguration document (apiVersion: nodegc.io/v1alpha1, kind: NodeGCConfiguration)",
			},
		},
		"section fields at the top of a kubelet document beside nodegc's": {
			doc: header + kubelet + "imageGCHighThresholdPercent: 100\nperiod: 1m\nmaxPerPodContainer: 2\ngcIgnoredResources: []\nkubeAPIQPS: 50\n",
			problems: []string{
				"line 7: period: the field imageGC.period or containerGC.period of a NodeGCConfiguration, in the KubeletConfiguration document (line 4), which has no such field: " +
					"nodegc would ignore it there; it belongs under imageGC or containerGC in the NodeGCConfiguration document (line 1)",
				"line 8: maxPerPodContainer: the field containerGC.maxPerPodContainer of a NodeGCConfiguration, in the KubeletConfiguration document (line 4), which has no such field: " +
					"nodegc would ignore it there; it belongs under containerGC in the NodeGCConfiguration document (line 1)",
				"line 9: gcIgnoredResources: the field ownerGC.gcIgnoredResources of a NodeGCConfiguration, in the KubeletConfiguration document (line 4), which has no such field: " +
					"nodegc would ignore it there; it belongs under ownerGC in the NodeGCConfiguration document (line 1)",
				// kubeAPIQPS is the kubelet's own too: no problem
			},
		},
		"a newer kubelet's fields": {
			doc: header + kubelet + "someFutureField: true\nlogging:\n  imageGC: x\nenableProfilingHandler: true\n",
			warnings: []string{
				"line 6: someFutureField: unknown field (ignored in the KubeletConfiguration document)",
				"line 8: logging.imageGC: unknown field (ignored in the KubeletConfiguration document)",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			var de *DecodeError
			switch {
			case tc.problems == nil && err != nil:
				t.Fatalf("Decode() = %v, want no error", err)
			case tc.problems != nil && !errors.As(err, &de):
				t.Fatalf("Decode() = %v, %v; want the problems %q (warnings %q)", loaded, err, tc.problems, loaded.Warnings)
			case tc.problems != nil:
				if diff := cmp.Diff(tc.problems, de.Problems); diff != "" {
					t.Errorf("problems (-want +got):\n%s", diff)
				}
				return
			}
			if diff := cmp.Diff(tc.warnings, slices.Sorted(slices.Values(withoutKubeletGCOn(loaded.Warnings)))); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNumbersAsWritten: 0, a decimal and a quoted "070" are read as
// written. A KubeletConfiguration's number with a leading 0 or a base
// prefix is read as the kubelet reads it (YAML 1.1: 070 is 56), with a
// warning naming its line, for the fields nodegc takes from it.
func TestNumbersAsWritten(t *testing.T) {
	loaded, err := Decode([]byte(header + "nodeName: \"070\"\nimageGC:\n  lowThresholdPercent: 0\n  exclude: [\"070\", '010']\n" +
		"ownerGC:\n  kubeAPIQPS: 0.5\n  kubeAPIBurst: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	if c.NodeName != "070" || *c.ImageGC.LowThresholdPercent != 0 || c.OwnerGC.KubeAPIQPS != 0.5 ||
		!slices.Equal(c.ImageGC.Exclude, []string{"070", "010"}) {
		t.Errorf("nodeName %q, lowThresholdPercent %d, kubeAPIQPS %v, exclude %q; want them as written",
			c.NodeName, *c.ImageGC.LowThresholdPercent, c.OwnerGC.KubeAPIQPS, c.ImageGC.Exclude)
	}
	if len(loaded.Warnings) > 0 {
		t.Errorf("warnings: %q", loaded.Warnings)
	}

	loaded, err = Decode([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 0x55\nimageGCLowThresholdPercent: 070\nmaxPods: 0110\n---\n" + header))
	if err != nil {
		t.Fatal(err)
	}
	ig := loaded.Config.ImageGC
	if *ig.HighThresholdPercent != 85 || *ig.LowThresholdPercent != 56 {
		t.Errorf("thresholds %d/%d, want 85/56, as the kubelet reads them", *ig.HighThresholdPercent, *ig.LowThresholdPercent)
	}
	want := []string{
		"line 3: imageGCHighThresholdPercent: 0x55 of the KubeletConfiguration: a hexadecimal number (85); nodegc takes 85, as the kubelet does (write 85)",
		"line 4: imageGCLowThresholdPercent: 070 of the KubeletConfiguration: a leading 0 is read as octal (56); nodegc takes 56, as the kubelet does (write 70 or 56)",
	}
	if diff := cmp.Diff(want, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestKubeletBooleansAsWritten: the kubelet reads its configuration as
// YAML 1.1 (sigs.k8s.io/yaml), where a plain yes, no, on, off, y or n is a
// boolean: a KubeletConfiguration that the kubelet runs with must not stop
// nodegc, and nodegc takes mergeDefaultEvictionSettings as the kubelet
// does. Quoted, or in nodegc's own document, they stay strings (YAML 1.2),
// and a string field given one fails as it fails in the kubelet. Before,
// failSwapOn: yes was a problem and nodegc refused to start.
func TestKubeletBooleansAsWritten(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	loaded, err := Decode([]byte(kubelet + "failSwapOn: no\nserializeImagePulls: Off\nmergeDefaultEvictionSettings: yes\n" +
		"evictionHard:\n  imagefs.available: 10%\n---\n" + header + "nodeName: \"yes\"\nimageGC:\n  exclude: [on, \"off\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	if c.NodeName != "yes" || !slices.Equal(c.ImageGC.Exclude, []string{"on", "off"}) {
		t.Errorf("nodeName %q, exclude %q; want the strings as written in nodegc's document", c.NodeName, c.ImageGC.Exclude)
	}
	if _, merged := c.ImageGC.EvictionHard[SignalNodeFsAvailable]; !merged {
		t.Errorf("evictionHard %v: mergeDefaultEvictionSettings: yes not taken as true (the kubelet's defaults not merged)", c.ImageGC.EvictionHard)
	}
	loaded, err = Decode([]byte(kubelet + "mergeDefaultEvictionSettings: N\nevictionHard:\n  imagefs.available: 10%\n---\n" + header))
	if err != nil {
		t.Fatal(err)
	}
	if eh := loaded.Config.ImageGC.EvictionHard; len(eh) != 1 {
		t.Errorf("evictionHard %v: mergeDefaultEvictionSettings: N not taken as false (the kubelet's defaults merged)", eh)
	}

	_, err = Decode([]byte(kubelet + "cgroupDriver: on\n---\n" + header))
	if err == nil || !strings.Contains(err.Error(), "line 3: cgroupDriver") {
		t.Errorf("cgroupDriver: on (the kubelet reads a boolean, and refuses it): err %v; want a problem at line 3", err)
	}
	_, err = Decode([]byte(kubelet + "failSwapOn: \"no\"\n---\n" + header))
	if err == nil || !strings.Contains(err.Error(), "failSwapOn") {
		t.Errorf("failSwapOn: \"no\" (a string, quoted): err %v; want a problem naming the field", err)
	}
}

// TestIgnoredResourcesWithoutEventsWarn: a gcIgnoredResources list the file
// gives replaces the default, so one that leaves out the events entries
// (core and events.k8s.io) makes the owner GC watch every Event of the
// cluster; a warning at the list's line says so and names what is left
// out. The default, a null list, and a list that keeps both give none.
func TestIgnoredResourcesWithoutEventsWarn(t *testing.T) {
	const og = "ownerGC:\n  gcIgnoredResources:"
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"one resource": {doc: header + og + "\n  - {group: apps, resource: deployments}\n",
			want: []string{`line 4: ownerGC.gcIgnoredResources leaves out {group: "", resource: events} and {group: "events.k8s.io", resource: events}: ` +
				"the list replaces the default, so the owner GC watches every Event of the cluster (kube-controller-manager's leaves them out); add them to keep them out"}},
		"empty": {doc: header + og + " []\n",
			want: []string{`line 4: ownerGC.gcIgnoredResources leaves out {group: "", resource: events} and {group: "events.k8s.io", resource: events}: ` +
				"the list replaces the default, so the owner GC watches every Event of the cluster (kube-controller-manager's leaves them out); add them to keep them out"}},
		"the core events only": {doc: header + og + "\n  - {group: '', resource: events}\n  - {group: apps, resource: deployments}\n",
			want: []string{`line 4: ownerGC.gcIgnoredResources leaves out {group: "events.k8s.io", resource: events}: ` +
				"the list replaces the default, so the owner GC watches every Event of the cluster (kube-controller-manager's leaves them out); add it to keep them out"}},
		"both kept": {doc: header + og + "\n  - {group: '', resource: events}\n  - {group: events.k8s.io, resource: events}\n  - {group: apps, resource: deployments}\n"},
		"null":      {doc: header + og + "\n"},
		"default":   {doc: header},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMinimumGCAgeZeroWarns: imageGC.minimumGCAge 0 in nodegc's own
// document means no minimum age, the opposite of the kubelet's
// imageMinimumGCAge 0s (kubeadm writes it into every node's config; the
// kubelet reads it as its 2m default), whose name the Reference gives as
// the field's upstream one: a value copied from there, 0s or "0", is kept
// as written, with a warning at its line. In a KubeletConfiguration
// document 0s is the 2m default already, and gives none; a nodegc 0s
// beside a kubelet's 5m wins, and warns.
func TestMinimumGCAgeZeroWarns(t *testing.T) {
	const kubelet = "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	const warning = "line 4: imageGC.minimumGCAge: 0s is no minimum age: an image may be removed as soon as it is listed " +
		"(the kubelet reads its imageMinimumGCAge 0s as its 2m default); write 1s for almost none, or leave it unset for the default"
	for name, tc := range map[string]struct {
		doc     string
		wantAge time.Duration
		want    []string
	}{
		"0s":  {doc: header + "imageGC:\n  minimumGCAge: 0s\n", want: []string{warning}},
		`"0"`: {doc: header + "imageGC:\n  minimumGCAge: \"0\"\n", want: []string{warning}},
		"over a kubelet's 5m": {doc: header + "imageGC:\n  minimumGCAge: 0s\n" + kubelet + "imageMinimumGCAge: 5m\n", want: []string{
			`line 4: imageGC.minimumGCAge "0s" hides the KubeletConfiguration's imageMinimumGCAge "5m0s" (line 8): remove the line (or write null) to take the kubelet's`,
			warning}},
		"the kubelet's 0s": {doc: header + kubelet + "imageMinimumGCAge: 0s\n", wantAge: DefaultImageMinimumGCAge},
		"1s":               {doc: header + "imageGC:\n  minimumGCAge: 1s\n", wantAge: time.Second},
		"null":             {doc: header + "imageGC:\n  minimumGCAge: null\n", wantAge: DefaultImageMinimumGCAge},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := loaded.Config.ImageGC.MinimumGCAge.Duration; got != tc.wantAge {
				t.Errorf("minimumGCAge = %v, want %v", got, tc.wantAge)
			}
			if diff := cmp.Diff(tc.want, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestThresholdsThatDoNothingWarn: an eviction threshold written as a tiny
// quantity ("0.15", meant as 15%) is a few bytes, which the kubelet never
// reaches first: nodegc's early start, its warning at start and the
// eviction alert are off by it; and highThresholdPercent 100 in nodegc's
// document turns its disk-threshold image GC off. Both are valid, as in the
// kubelet, and now warned about at their line; before, nothing was said.
func TestThresholdsThatDoNothingWarn(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  highThresholdPercent: 100\n  lowThresholdPercent: 80\n  evictionHard:\n" +
		"    imagefs.available: \"0.15\"\n    nodefs.available: 2Mi\n  evictionSoft:\n    nodefs.available: 10k\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`line 4: imageGC.highThresholdPercent: 100 turns nodegc's disk-threshold image GC off: no image is removed for disk space (only past maximumGCAge, if set), and under disk pressure the kubelet's eviction removes images instead`,
		`line 7: imageGC.evictionHard[imagefs.available]: "0.15" is a quantity of 1 byte(s), which the kubelet never reaches before the disk is full; a percentage is written "15%"`,
		`line 10: imageGC.evictionSoft[nodefs.available]: "10k" is a quantity of 10000 byte(s), which the kubelet never reaches before the disk is full; a percentage is written "15%"`,
	}
	if diff := cmp.Diff(want, loaded.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	loaded, err = Decode([]byte(header + "imageGC:\n  highThresholdPercent: 99\n  evictionHard:\n    imagefs.available: 1Gi\n    nodefs.available: \"0%\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Warnings) > 0 {
		t.Errorf("warnings %q, want none", loaded.Warnings)
	}
}

// withoutKubeletGCOn drops the warning that a KubeletConfiguration
// document leaves the kubelet's image GC on (TestKubeletImageGCOnWarns),
// for the tests about other warnings of such a document.
func withoutKubeletGCOn(warnings []string) []string {
	var out []string
	for _, w := range warnings {
		if !strings.Contains(w, "'s image GC is on (") {
			out = append(out, w)
		}
	}
	return out
}

// TestKubeletImageGCOnWarns: a KubeletConfiguration document whose image GC
// is on (imageGCHighThresholdPercent under 100, or unset: 85) races
// nodegc's for the same images: a warning at its line says to turn it off
// where a node agent runs. Before, it was taken without a word.
func TestKubeletImageGCOnWarns(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	for name, tc := range map[string]struct {
		doc, want string
	}{
		"its threshold":   {kubelet + "imageGCHighThresholdPercent: 85\nimageGCLowThresholdPercent: 80\n", "line 3: the KubeletConfiguration's image GC is on (imageGCHighThresholdPercent 85)"},
		"unset":           {kubelet + "cgroupDriver: systemd\n", "line 1: the KubeletConfiguration's image GC is on (imageGCHighThresholdPercent unset: 85)"},
		"off, as advised": {kubelet + "imageGCHighThresholdPercent: 100\nimageMaximumGCAge: 0s\n", ""},
		"on by age alone": {kubelet + "imageGCHighThresholdPercent: 100\nimageMaximumGCAge: 24h\n", "line 4: the KubeletConfiguration's image GC is on (imageMaximumGCAge 24h0m0s)"},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc + "---\n" + header))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range loaded.Warnings {
				if strings.Contains(w, "'s image GC is on (") {
					got = append(got, w)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warnings %q, want none about the kubelet's image GC", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
				t.Errorf("warnings %q, want one beginning %q", got, tc.want)
			}
		})
	}
}

// TestDigest: two files that set the same values, written differently
// (fields in another order, a comment, a default given or left out), give
// one digest, the SHA-256 of what `config defaults` prints for them; one
// value changed gives another.
func TestDigest(t *testing.T) {
	digest := func(doc string) string {
		t.Helper()
		loaded, err := Decode([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		d, err := Digest(loaded.Config)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	defaults := digest(header)
	if len(defaults) != 16 || strings.Trim(defaults, "0123456789abcdef") != "" {
		t.Fatalf("Digest = %q, want 16 hex digits", defaults)
	}
	if d := digest("kind: NodeGCConfiguration\n# the defaults\napiVersion: nodegc.io/v1alpha1\nimageGC:\n  lowThresholdPercent: 80\n"); d != defaults {
		t.Errorf("the defaults written otherwise: %s, want %s", d, defaults)
	}
	if d := digest(header + "imageGC:\n  lowThresholdPercent: 70\n"); d == defaults {
		t.Errorf("lowThresholdPercent 70: %s, the defaults' digest", d)
	}
}

// TestMergeKubeletExplicitZero: a field of the NodeGCConfiguration document
// written at the zero value that SetDefaults replaces (containerRuntimeEndpoint
// "", containerGC.podLogsDirectory "", runtimeRequestTimeout 0s) says "the
// default", not a value: it must not hide the KubeletConfiguration's value,
// which nodegc takes (else nodegc's default replaced the kubelet's, silently,
// and a 10m runtimeRequestTimeout became 2m, narrowing the container GC's
// start grace). imageServiceEndpoint "" means "the runtime endpoint": it
// wins, with a warning naming the kubelet's value it hides. Before, the
// kubelet's three values were lost (containerd, /var/log/pods, 2m) with no
// warning.
func TestMergeKubeletExplicitZero(t *testing.T) {
	doc := header + "containerRuntimeEndpoint: \"\"\nimageServiceEndpoint: \"\"\nruntimeRequestTimeout: 0s\n" +
		"containerGC:\n  podLogsDirectory: \"\"\n" +
		"---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"containerRuntimeEndpoint: unix:///var/run/crio/crio.sock\nimageServiceEndpoint: unix:///var/run/crio/images.sock\n" +
		"podLogsDir: /data/pod-logs\nruntimeRequestTimeout: 10m\n"
	loaded, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := loaded.Config
	got := map[string]any{
		"runtime":  c.ContainerRuntimeEndpoint,
		"images":   c.ImageServiceEndpoint,
		"podLogs":  c.ContainerGC.PodLogsDirectory,
		"timeout":  c.RuntimeRequestTimeout.Duration,
		"fromKubl": strings.Join(loaded.FromKubelet, ","),
	}
	want := map[string]any{
		"runtime":  "unix:///var/run/crio/crio.sock",
		"images":   "", // nodegc's: the runtime endpoint
		"podLogs":  "/data/pod-logs",
		"timeout":  10 * time.Minute,
		"fromKubl": "containerRuntimeEndpoint,containerGC.podLogsDirectory,runtimeRequestTimeout",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged config (-want +got):\n%s", diff)
	}
	// The lines are the kubelet's, where the values come from.
	for path, line := range map[string]int{"containerRuntimeEndpoint": 11, "containerGC.podLogsDirectory": 13, "runtimeRequestTimeout": 14} {
		if got := loaded.Line(path); got != line {
			t.Errorf("Line(%s) = %d, want %d (the KubeletConfiguration's)", path, got, line)
		}
	}
	wantWarnings := []string{`line 4: imageServiceEndpoint: "" (the same as containerRuntimeEndpoint) hides the KubeletConfiguration's ` +
		`imageServiceEndpoint "unix:///var/run/crio/images.sock" (line 12): nodegc asks for images at unix:///var/run/crio/crio.sock; ` +
		`remove the line (or write null) to take the kubelet's`}
	if diff := cmp.Diff(wantWarnings, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if errs := Validate(c); len(errs) > 0 {
		t.Errorf("merged config invalid: %v", errs)
	}

	// A value the nodegc document gives still wins, with a warning that
	// names the kubelet's (TestHiddenKubeletValuesWarned), and an empty
	// imageServiceEndpoint beside a kubelet that sets none says nothing.
	loaded, err = Decode([]byte(header + "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\nimageServiceEndpoint: \"\"\n" +
		"runtimeRequestTimeout: 1m\n---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"containerRuntimeEndpoint: unix:///var/run/crio/crio.sock\nruntimeRequestTimeout: 10m\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := loaded.Config; c.ContainerRuntimeEndpoint != "unix:///run/containerd/containerd.sock" || c.RuntimeRequestTimeout.Duration != time.Minute ||
		len(loaded.FromKubelet) != 0 {
		t.Errorf("runtime %q, timeout %v, from the kubelet %q; want nodegc's values", c.ContainerRuntimeEndpoint, c.RuntimeRequestTimeout.Duration, loaded.FromKubelet)
	}
	wantWarnings = []string{
		`line 3: containerRuntimeEndpoint "unix:///run/containerd/containerd.sock" hides the KubeletConfiguration's containerRuntimeEndpoint ` +
			`"unix:///var/run/crio/crio.sock" (line 9): remove the line (or write null) to take the kubelet's`,
		`line 5: runtimeRequestTimeout "1m0s" hides the KubeletConfiguration's runtimeRequestTimeout "10m0s" (line 10): ` +
			`remove the line (or write null) to take the kubelet's`,
	}
	if diff := cmp.Diff(wantWarnings, withoutKubeletGCOn(loaded.Warnings)); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestSectionFieldsFromTheTypes: the fields of nodegc's sections that a
// KubeletConfiguration document refuses at its top (see
// TestNodegcFieldInKubeletDocument) are read from the types: each of
// imageGC's, containerGC's and ownerGC's, but those the kubelet has too
// (evictionHard, kubeAPIQPS), which are the kubelet's own there.
func TestSectionFieldsFromTheTypes(t *testing.T) {
	got := sectionFields()
	for name, want := range map[string]string{
		"exclude": "imageGC", "keepNewestPerRepository": "imageGC", "minimumGCAge": "imageGC", "maximumGCAge": "imageGC",
		"fillRateHorizon": "imageGC", "diskCheckInterval": "imageGC", "containerEvents": "imageGC", "highThresholdPercent": "imageGC",
		"minAge": "containerGC", "maxAge": "containerGC", "minAgeFrom": "containerGC", "maxPerPodContainer": "containerGC",
		"maxContainers": "containerGC", "podLogsDirectory": "containerGC", "gcIgnoredResources": "ownerGC",
		"stuckDeletionThreshold": "ownerGC", "period": "imageGC,containerGC", "dryRun": "imageGC,containerGC,ownerGC",
		"evictionHard": "", "evictionSoft": "", "kubeAPIQPS": "", "kubeAPIBurst": "", "kubeconfig": "", "leaseDuration": "",
	} {
		if g := strings.Join(got[name], ","); g != want {
			t.Errorf("sectionFields()[%q] = %q, want %q", name, g, want)
		}
	}
}

// TestLoadWarnsFillRateNeedsFastChecks: pkg/images measures the fill rate
// over the readings of its last FillRateWindow (5s) and needs three of them
// there, so with diskCheckInterval at half of it or more (2.5s: the third
// reading is as old as the window, and lost to the timing's jitter half of
// the time) fillRateHorizon's early start is off, where the runtime's
// writes are not followed: a warning at diskCheckInterval's line names both
// fields. fillRateHorizon 0 says it is off on purpose: no warning. Before,
// none.
func TestLoadWarnsFillRateNeedsFastChecks(t *testing.T) {
	const want = "line 4: imageGC.diskCheckInterval: 3s is too long for imageGC.fillRateHorizon (30s): the fill rate is measured " +
		"from three disk readings within 5s, so at one reading every 2.5s or more the early start before the high threshold is off " +
		"(but while the runtime's writes are followed: containerd's, once its stream is open); " +
		"write a diskCheckInterval under 2.5s, or fillRateHorizon: 0s to turn it off"
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"3s":               {"imageGC:\n  diskCheckInterval: 3s\n", []string{want}},
		"2.5s":             {"imageGC:\n  diskCheckInterval: 2500ms\n", []string{strings.NewReplacer("3s", "2.5s").Replace(want)}},
		"2s":               {"imageGC:\n  diskCheckInterval: 2s\n", nil},
		"horizon off":      {"imageGC:\n  diskCheckInterval: 10s\n  fillRateHorizon: 0s\n", nil},
		"default":          {"imageGC:\n  period: 1m\n", nil},
		"a longer horizon": {"imageGC:\n  diskCheckInterval: 1m\n  fillRateHorizon: 2m\n", []string{strings.NewReplacer("3s", "1m0s", "(30s)", "(2m0s)").Replace(want)}},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(header + tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFillRateWindowIsTheGuardians: FillRateWindow is pkg/images' fillWindow
// (guardian.go), which config cannot import: read from its source.
func TestFillRateWindowIsTheGuardians(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "images", "guardian.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^const fillWindow = (\d+) \* time\.Second$`).FindSubmatch(src)
	if m == nil {
		t.Fatal("pkg/images/guardian.go: no `const fillWindow = N * time.Second`; update this test and FillRateWindow")
	}
	if n, _ := strconv.Atoi(string(m[1])); time.Duration(n)*time.Second != FillRateWindow {
		t.Errorf("pkg/images fillWindow is %ss, FillRateWindow %v: make them agree", m[1], FillRateWindow)
	}
}

// TestWarningsInLineOrder: warnings are in line order, as problems are,
// those without a line last, whichever check found them. Before, in the
// order of the checks (line 4, then 6, then 3).
func TestWarningsInLineOrder(t *testing.T) {
	loaded, err := Decode([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 100\nsomeFutureField: 1\nevictionHard:\n  imagefs.avaliable: 10%\n"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, w := range loaded.Warnings {
		lines = append(lines, lineOf(w))
	}
	if want := []int{3, 4, 6}; !slices.Equal(lines, want) {
		t.Errorf("warnings on lines %v, want %v:\n%s", lines, want, strings.Join(loaded.Warnings, "\n"))
	}
}

// TestProfilingWithMetricsOffWarns: the profiles are served on
// metricsBindAddress: with it "0" (off), enableProfilingHandler: true
// serves none, which a warning at its line says. Before, none.
func TestProfilingWithMetricsOffWarns(t *testing.T) {
	loaded, err := Decode([]byte(header + "enableProfilingHandler: true\nmetricsBindAddress: \"0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`line 3: enableProfilingHandler: true serves Go's profiles on metricsBindAddress, which is "0" (off): ` +
		`no profile is served; give metricsBindAddress an address to serve them`}
	if diff := cmp.Diff(want, loaded.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	loaded, err = Decode([]byte(header + "enableProfilingHandler: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded.Warnings) > 0 {
		t.Errorf("profiling on the default metrics address: warnings %q, want none", loaded.Warnings)
	}
}
