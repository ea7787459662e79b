package config

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const kubeletHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// TestDecodeProblemsWithValidation: when some fields fail to decode, the
// DecodeError also lists the validation problems of what did decode, each
// with its line, in line order; a validation problem about a field that
// failed to decode is left out, and unknown fields hide nothing.
func TestDecodeProblemsWithValidation(t *testing.T) {
	const maxPerPodMsg = "must be at least 1, or negative for no limit: nodegc always keeps the newest dead container " +
		"of a live pod's container (kubectl logs --previous needs it)"
	cases := map[string]struct {
		yaml string
		want []string
	}{
		"unknown field, wrong type and invalid values together": {
			yaml: header +
				"imageGC:\n" +
				"  highThresholdPercnt: 80\n" + // line 4: unknown field (a typo)
				"  lowThresholdPercent: 120\n" + // line 5: > 100, and not below the default high (85)
				"containerGC:\n" +
				"  maxPerPodContainer: 0\n" + // line 7: invalid
				"  period: banana\n", // line 8: wrong type
			want: []string{
				"line 4: imageGC.highThresholdPercnt: unknown field",
				"line 5: imageGC.lowThresholdPercent: Invalid value: 120: must be between 0 and 100, inclusive",
				"line 5: imageGC.lowThresholdPercent: Invalid value: 120: must be less than highThresholdPercent (85)",
				"line 7: containerGC.maxPerPodContainer: Invalid value: 0: " + maxPerPodMsg,
				`line 8: containerGC.period: time: invalid duration "banana" (want a duration such as "90s", "2m" or "12h45m")`,
			},
		},
		"fields decoded before and after a bad one are validated": {
			yaml: header +
				"stateDirectory: relative\n" + // line 3: decodes, invalid
				"runtimeRequestTimeout: soon\n" + // line 4: wrong type; aborts a plain decode
				"metricsBindAddress: nowhere\n", // line 5: decodes, invalid
			want: []string{
				"line 3: stateDirectory: Invalid value: \"relative\": must be an absolute path",
				`line 4: runtimeRequestTimeout: time: invalid duration "soon" (want a duration such as "90s", "2m" or "12h45m")`,
				`line 5: metricsBindAddress: Invalid value: "nowhere": must be "host:port", ":port", or "0" to disable`,
			},
		},
		"a duration in a unit Go does not read (days) gets the hint too": {
			yaml: header + "imageGC:\n  maximumGCAge: 7d\n",
			want: []string{
				`line 4: imageGC.maximumGCAge: time: unknown unit "d" in duration "7d" (want a duration such as "90s", "2m" or "12h45m")`,
			},
		},
		"a cross-field rule naming a field that failed to decode is left out": {
			yaml: header + "imageGC:\n  highThresholdPercent: high\n  lowThresholdPercent: 90\n",
			want: []string{
				`line 4: imageGC.highThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`,
			},
		},
		"a cross-field rule naming a field that decoded is kept": {
			yaml: header + "leaderElection:\n  renewDeadline: 20s\n  resourceLock: 7\n",
			want: []string{
				`line 3: leaderElection.leaseDuration: Invalid value: "15s": must be greater than renewDeadline (20s), in whole seconds (the Lease holds leaseDurationSeconds)`, // not in the file: its parent
				"line 5: leaderElection.resourceLock: cannot unmarshal number into a value of type string (want a string: quote it; unquoted, YAML reads it as a number)",
			},
		},
		"problems under a field that failed to decode are left out": {
			yaml: header + "imageGC:\n  exclude:\n  - ''\n  - 3\n  lowThresholdPercent: 101\n",
			want: []string{
				"line 6: imageGC.exclude[1]: cannot unmarshal number into a value of type string (want a string: quote it; unquoted, YAML reads it as a number)",
				"line 7: imageGC.lowThresholdPercent: Invalid value: 101: must be between 0 and 100, inclusive",
				"line 7: imageGC.lowThresholdPercent: Invalid value: 101: must be less than highThresholdPercent (85)",
			},
		},
		"a duplicate key is not validated under either value": {
			yaml: header + "containerGC:\n  maxPerPodContainer: 0\n  maxPerPodContainer: 2\n",
			want: []string{
				"line 5: containerGC.maxPerPodContainer: duplicate key (first set at line 4)",
			},
		},
		"a number that is not valid here is not validated": {
			yaml: header + "imageGC:\n  exclude: [.nan]\n", // not "must not be empty"
			want: []string{
				"line 4: imageGC.exclude[0]: .nan is not a valid number here",
			},
		},
		"a clean KubeletConfiguration is merged before validation": {
			yaml: header + "containerGC:\n  period: banana\n---\n" + kubeletHeader +
				"imageGCLowThresholdPercent: 95\n", // line 8
			want: []string{
				`line 4: containerGC.period: time: invalid duration "banana" (want a duration such as "90s", "2m" or "12h45m")`,
				"line 8: imageGC.lowThresholdPercent: Invalid value: 95: must be less than highThresholdPercent (85)",
			},
		},
		"a KubeletConfiguration with a problem is not merged": {
			yaml: header + "---\n" + kubeletHeader +
				"imageGCHighThresholdPercent: lots\n" + // line 6
				"imageGCLowThresholdPercent: 95\n",
			want: []string{
				`line 6: imageGCHighThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`,
			},
		},
		"a field a KubeletConfiguration with a problem would set is not validated": {
			yaml: header + "imageGC:\n  lowThresholdPercent: 90\n---\n" + kubeletHeader +
				"imageGCHighThresholdPercent: 95\n" + // line 8: not merged, so high holds its default (85)
				"imageMinimumGCAge: soon\n",
			want: []string{
				`line 9: imageMinimumGCAge: time: invalid duration "soon" (want a duration such as "90s", "2m" or "12h45m")`,
			},
		},
		// What the nodegc document gives is validated: the kubelet's
		// value would not replace it (only an explicit zero, which
		// says "the default", leaves the field to the kubelet's).
		"a field the NodeGCConfiguration gives is validated beside a KubeletConfiguration with a problem": {
			yaml: header + "runtimeRequestTimeout: 30h\n---\n" + kubeletHeader +
				"runtimeRequestTimeout: 10m\n" + // line 7
				"imageMinimumGCAge: soon\n",
			want: []string{
				`line 3: runtimeRequestTimeout: Invalid value: "30h0m0s": must be at most 24h0m0s`,
				`line 8: imageMinimumGCAge: time: invalid duration "soon" (want a duration such as "90s", "2m" or "12h45m")`,
			},
		},
		"without a NodeGCConfiguration document nothing is validated": {
			yaml: kubeletHeader + "imageGCHighThresholdPercent: lots\nimageGCLowThresholdPercent: 120\n",
			want: []string{
				`line 3: imageGCHighThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`,
			},
		},
		"problems of every document in line order": {
			yaml: kubeletHeader + "imageGCHighThresholdPercent: lots\n---\n" + header +
				"imageGC:\n  lowThresholdPercent: 120\n  bogus: 1\n",
			want: []string{
				`line 3: imageGCHighThresholdPercent: cannot unmarshal string into a value of type int32 (want a whole number from 0 to 100, without "%")`,
				"line 8: imageGC.lowThresholdPercent: Invalid value: 120: must be between 0 and 100, inclusive",
				// not "must be less than highThresholdPercent": the file's high failed to decode
				"line 9: imageGC.bogus: unknown field",
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.yaml))
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode() = %v, %v; want a *DecodeError", loaded, err)
			}
			if diff := cmp.Diff(tc.want, de.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoadedProblems: validation errors become "line N: <error>" lines in
// line order, those the file does not locate last.
func TestLoadedProblems(t *testing.T) {
	loaded, err := Decode([]byte(header + "containerGC:\n  period: 1m\nimageGC:\n  period: 1m\n"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		loaded *Loaded
		errs   field.ErrorList
		want   []string
	}{
		"sorted by line, unlocated last": {
			loaded: loaded,
			errs: field.ErrorList{
				field.Invalid(field.NewPath("ownerGC", "kubeAPIQPS"), 0, "must be greater than 0"),
				field.Invalid(field.NewPath("imageGC", "period"), "0s", "must be greater than 0"),
				field.Invalid(field.NewPath("containerGC", "period"), "0s", "must be greater than 0"),
			},
			want: []string{
				`line 4: containerGC.period: Invalid value: "0s": must be greater than 0`,
				`line 6: imageGC.period: Invalid value: "0s": must be greater than 0`,
				"ownerGC.kubeAPIQPS: Invalid value: 0: must be greater than 0",
			},
		},
		"no file": {
			loaded: nil,
			errs:   field.ErrorList{field.Required(field.NewPath("containerGC", "maxContainers"), "")},
			want:   []string{"containerGC.maxContainers: Required value"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.loaded.Problems(tc.errs)); diff != "" {
				t.Errorf("Problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProblemsNameTheFlagOfAnotherField: a rule between two fields is
// reported on one of them; when a flag set the other, which the message
// quotes, the problem says so. A file that sets healthzBindAddress ":10290"
// (line 3) and --metrics-bind-address=127.0.0.1:10290 clash: the problem
// stays on the file's line, and adds where the metrics address came from.
// Before, it read as if the file gave both, and named no flag.
func TestProblemsNameTheFlagOfAnotherField(t *testing.T) {
	loaded, err := Decode([]byte(header + "healthzBindAddress: \":10290\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	loaded.Config.MetricsBindAddress = "127.0.0.1:10290"
	loaded.SetByFlag("metricsBindAddress", "--metrics-bind-address")
	want := []string{`line 3: healthzBindAddress: Invalid value: ":10290": listens on the port of metricsBindAddress ("127.0.0.1:10290") ` +
		"on an overlapping address: write both the same to serve /metrics, /healthz and /readyz on one listener, or use another port " +
		"(metricsBindAddress from --metrics-bind-address)"}
	if diff := cmp.Diff(want, loaded.Problems(Validate(loaded.Config))); diff != "" {
		t.Errorf("Problems (-want +got):\n%s", diff)
	}
}

// TestOverrideAppliesToAFileThatDoesNotDecode: WithOverride's changes (a
// flag's value) apply before the validation Decode makes of a file that
// does not decode whole: the clash a flag fixes is not reported, and a
// field a flag sets is validated with the flag's value, blamed on the
// flag, even where the file's value failed to decode.
func TestOverrideAppliesToAFileThatDoesNotDecode(t *testing.T) {
	flag := func(path, value string) Option {
		return WithOverride(func(l *Loaded) {
			switch path {
			case "metricsBindAddress":
				l.Config.MetricsBindAddress = value
			case "healthzBindAddress":
				l.Config.HealthzBindAddress = value
			}
			l.SetByFlag(path, "--flag")
		})
	}
	for name, tc := range map[string]struct {
		yaml string
		opt  Option
		want []string
	}{
		"a clash the flag fixes": {
			yaml: header + "metricsBindAddress: \"127.0.0.1:10280\"\nimageGC:\n  perod: 5m\n",
			opt:  flag("healthzBindAddress", ":9999"),
			want: []string{"line 5: imageGC.perod: unknown field"},
		},
		"a bad flag value where the file's failed to decode": {
			yaml: header + "metricsBindAddress: 10281\n",
			opt:  flag("metricsBindAddress", "nowhere"),
			want: []string{
				`line 3: metricsBindAddress: cannot unmarshal number into a value of type string (want a quoted "host:port" or ":port", such as ":10281", or "0" to disable)`,
				`--flag: metricsBindAddress: Invalid value: "nowhere": must be "host:port", ":port", or "0" to disable`,
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.yaml), tc.opt)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode() = %v, want a *DecodeError", err)
			}
			if diff := cmp.Diff(tc.want, de.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeIntoKeepsWhatDecoded: when some fields fail to decode, the target
// holds every other field as the file gives it and nothing of the failed
// ones (a plain decode stops at the first failure, or leaves a list half
// written), and the failed paths are returned.
func TestDecodeIntoKeepsWhatDecoded(t *testing.T) {
	cases := map[string]struct {
		yaml    string
		want    *NodeGCConfiguration
		wantBad []string
	}{
		"fields after a bad duration": {
			yaml: header + "stateDirectory: /a\nruntimeRequestTimeout: soon\nmetricsBindAddress: :1\n" +
				"imageGC:\n  minimumGCAge: never\n  period: 1m\n",
			want: &NodeGCConfiguration{
				TypeMeta:           metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
				StateDirectory:     "/a",
				MetricsBindAddress: ":1",
				ImageGC:            ImageGCConfiguration{Period: metav1.Duration{Duration: time.Minute}},
			},
			wantBad: []string{"imageGC.minimumGCAge", "runtimeRequestTimeout"},
		},
		"a list with a bad item is left out whole": {
			yaml: header + "imageGC:\n  exclude: [a, 3]\n  keepNewestPerRepository: 2\n",
			want: &NodeGCConfiguration{
				TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
				ImageGC:  ImageGCConfiguration{KeepNewestPerRepository: 2},
			},
			wantBad: []string{"imageGC.exclude"},
		},
		"duplicate keys and invalid numbers": {
			yaml: header + "nodeName: a\nnodeName: b\nownerGC:\n  kubeAPIQPS: .inf\n",
			want: &NodeGCConfiguration{
				TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
				NodeName: "a",
			},
			wantBad: []string{"nodeName", "ownerGC.kubeAPIQPS"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			docs, err := splitDocuments([]byte(tc.yaml))
			if err != nil || len(docs) != 1 {
				t.Fatalf("splitDocuments() = %d documents, %v", len(docs), err)
			}
			got := &NodeGCConfiguration{}
			problems, bad := docs[0].decodeInto(got, nil)
			if len(problems) == 0 {
				t.Error("decodeInto() reported no problem")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantBad, slices.Sorted(slices.Values(bad))); diff != "" {
				t.Errorf("bad paths (-want +got):\n%s", diff)
			}
		})
	}
}
