package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEvictionHardFromKubelet: the kubelet document's evictionHard is taken
// whole when the nodegc document sets none, a kubelet's memory signal and
// all; the nodegc document's own map wins; an empty map says the kubelet
// does not evict on disk, which is not the defaults.
func TestEvictionHardFromKubelet(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"evictionHard:\n  memory.available: 100Mi\n  imagefs.available: 20%\n  nodefs.available: 5Gi\n"
	cases := map[string]struct {
		doc  string
		want map[string]string
	}{
		"kubelet's": {kubelet, map[string]string{"memory.available": "100Mi", "imagefs.available": "20%", "nodefs.available": "5Gi"}},
		"nodegc's wins": {kubelet + "---\n" + header + "imageGC:\n  evictionHard:\n    imagefs.available: 12%\n",
			map[string]string{"imagefs.available": "12%"}},
		"kubelet evicts on nothing": {"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard: {}\n", map[string]string{}},
		"neither: kubelet defaults": {header, DefaultEvictionHard()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, loaded.Config.ImageGC.EvictionHard); diff != "" {
				t.Errorf("evictionHard (-want +got):\n%s", diff)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate() = %v", errs)
			}
		})
	}
}

// TestKubeletSignalNodegcDoesNotKnow: a node's KubeletConfiguration may be
// a newer kubelet's, with a signal nodegc does not know (its unknown fields
// are warnings too): the signal is left out with a warning naming its line,
// and the configuration loads, where the same signal written in the
// NodeGCConfiguration is an error (TestEvictionHardValidation).
func TestKubeletSignalNodegcDoesNotKnow(t *testing.T) {
	doc := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"evictionHard:\n  imagefs.available: 20%\n  someNewFs.available: 5%\n"
	loaded, err := Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"imagefs.available": "20%"}, loaded.Config.ImageGC.EvictionHard); diff != "" {
		t.Errorf("evictionHard (-want +got):\n%s", diff)
	}
	if errs := Validate(loaded.Config); len(errs) > 0 {
		t.Errorf("Validate() = %v", errs)
	}
	want := `line 5: evictionHard[someNewFs.available] of the KubeletConfiguration`
	if !slices.ContainsFunc(loaded.Warnings, func(w string) bool { return strings.HasPrefix(w, want) }) {
		t.Errorf("warnings %q, want one beginning %q", loaded.Warnings, want)
	}
}

// TestEvictionHardValidation names the signal and the rule. The values of
// the kubelet's other signals are not nodegc's to check, but a signal the
// kubelet does not know is refused, as the kubelet refuses it: a misspelt
// disk signal would otherwise leave the disk thresholds unset, turning off
// the early start, the warning at start and the eviction alert.
func TestEvictionHardValidation(t *testing.T) {
	c := Defaulted()
	c.ImageGC.EvictionHard = map[string]string{
		"imagefs.available": "115%", "nodefs.available": "lots", "memory.available": "whatever",
		"pid.available": "10%", "imagefs.avaliable": "15%",
	}
	errs := Validate(c)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`imageGC.evictionHard[imagefs.available]: Invalid value: "115%": percentage "115%": must be between 0% and 100%`,
		`imageGC.evictionHard[nodefs.available]: Invalid value: "lots": "lots": must be a percentage ("15%") or a quantity ("2Gi")`,
		`imageGC.evictionHard[imagefs.avaliable]: Unsupported value: "imagefs.avaliable": supported values: "allocatableMemory.available", "containerfs.available", "containerfs.inodesFree", "imagefs.available", "imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	c.ImageGC.FillRateHorizon = nil
	if errs := Validate(c); !strings.Contains(errs.ToAggregate().Error(), "imageGC.fillRateHorizon: Required value") {
		t.Errorf("an unset fillRateHorizon is not reported: %v", errs)
	}
}

// TestSignalLines: a problem or a warning about an eviction signal names
// the line of the signal's key, in either document, not that of
// evictionHard or evictionSoft.
func TestSignalLines(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  evictionHard:\n    nodefs.available: 10%\n    imagefs.avaliable: 15%\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := loaded.Problems(Validate(loaded.Config))
	want := `line 6: imageGC.evictionHard[imagefs.avaliable]: Unsupported value: "imagefs.avaliable": supported values: ` +
		`"allocatableMemory.available", "containerfs.available", "containerfs.inodesFree", "imagefs.available", "imagefs.inodesFree", ` +
		`"memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"`
	if diff := cmp.Diff([]string{want}, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// The same file given to the agent as decode problems.
	_, err = Decode([]byte(header + "imageGC:\n  evictionHard:\n    nodefs.available: 10%\n    imagefs.avaliable: 15%\n  bogus: 1\n"))
	var de *DecodeError
	if !errors.As(err, &de) || !slices.Contains(de.Problems, want) {
		t.Errorf("Decode() = %v, want a problem %q", err, want)
	}
}

// TestDiskEviction: the stricter threshold wins, whichever form it has and
// whether it is hard or soft; a soft one only when strictly stricter.
func TestDiskEviction(t *testing.T) {
	const gi = 1 << 30
	cases := []struct {
		hard, soft map[string]string
		capacity   uint64
		want       uint64
		wantWhich  string
		wantOK     bool
	}{
		{DefaultEvictionHard(), nil, 100 * gi, 15 * gi, "evictionHard imagefs.available<15%", true},
		{map[string]string{SignalImageFsAvailable: "1Gi", SignalNodeFsAvailable: "10%"}, nil, 100 * gi, 10 * gi, "evictionHard nodefs.available<10%", true},
		{map[string]string{SignalImageFsAvailable: "20Gi", SignalNodeFsAvailable: "10%"}, nil, 100 * gi, 20 * gi, "evictionHard imagefs.available<20Gi", true},
		{map[string]string{"memory.available": "100Mi"}, nil, 100 * gi, 0, "", false},
		{map[string]string{}, map[string]string{}, 100 * gi, 0, "", false},
		{DefaultEvictionHard(), map[string]string{SignalImageFsAvailable: "25%"}, 100 * gi, 25 * gi, "evictionSoft imagefs.available<25%", true},
		{DefaultEvictionHard(), map[string]string{SignalNodeFsAvailable: "30Gi"}, 100 * gi, 30 * gi, "evictionSoft nodefs.available<30Gi", true},
		{DefaultEvictionHard(), map[string]string{SignalImageFsAvailable: "15%"}, 100 * gi, 15 * gi, "evictionHard imagefs.available<15%", true},
		{DefaultEvictionHard(), map[string]string{SignalImageFsAvailable: "10%", "memory.available": "1Gi"}, 100 * gi, 15 * gi, "evictionHard imagefs.available<15%", true},
		{DefaultEvictionHard(), map[string]string{SignalImageFsAvailable: "100%"}, 100 * gi, 15 * gi, "evictionHard imagefs.available<15%", true},
		{map[string]string{}, map[string]string{SignalNodeFsAvailable: "12%"}, 100 * gi, 12 * gi, "evictionSoft nodefs.available<12%", true},
	}
	for _, tc := range cases {
		ig := ImageGCConfiguration{EvictionHard: tc.hard, EvictionSoft: tc.soft}
		got, which, ok := ig.DiskEviction(tc.capacity)
		w := ""
		if ok {
			w = which.String()
		}
		if got != tc.want || w != tc.wantWhich || ok != tc.wantOK || which.Soft() != strings.HasPrefix(tc.wantWhich, "evictionSoft") {
			t.Errorf("DiskEviction(hard %v, soft %v, %d) = %d, %q, %v; want %d, %q, %v", tc.hard, tc.soft, tc.capacity, got, w, ok, tc.want, tc.wantWhich, tc.wantOK)
		}
	}
}

// TestKubeletMeaningOfItsFields: a KubeletConfiguration's fields mean what
// the kubelet makes of them. kubeadm writes imageMinimumGCAge: 0s into every
// node's kubelet config, which the kubelet reads as its default of 2m, not
// as "no minimum age"; mergeDefaultEvictionSettings fills the default
// thresholds a partial evictionHard leaves out; and "0%" or "100%" turns a
// threshold off.
func TestKubeletMeaningOfItsFields(t *testing.T) {
	kubelet := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	const gi = 1 << 30
	for name, tc := range map[string]struct {
		doc          string
		wantMinAge   string
		wantEviction map[string]string
		wantAt       uint64 // DiskEviction of 100 GiB; 0: none
	}{
		"kubeadm's zero minimum age is the kubelet's 2m": {
			doc:        kubelet + "imageMinimumGCAge: 0s\nimageMaximumGCAge: 0s\n",
			wantMinAge: "2m0s", wantEviction: DefaultEvictionHard(), wantAt: 15 * gi,
		},
		"nodegc's own zero minimum age stays": {
			doc:        kubelet + "imageMinimumGCAge: 5m\n---\n" + header + "imageGC:\n  minimumGCAge: 0s\n",
			wantMinAge: "0s", wantEviction: DefaultEvictionHard(), wantAt: 15 * gi,
		},
		"partial evictionHard merged with the defaults": {
			doc:          kubelet + "mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 200Mi\n  nodefs.available: 5%\n",
			wantMinAge:   "2m0s",
			wantEviction: map[string]string{"memory.available": "200Mi", "nodefs.available": "5%", "imagefs.available": "15%"},
			wantAt:       15 * gi,
		},
		"partial evictionHard without the merge": {
			doc:          kubelet + "evictionHard:\n  memory.available: 200Mi\n",
			wantMinAge:   "2m0s",
			wantEviction: map[string]string{"memory.available": "200Mi"},
		},
		"100% turns a threshold off": {
			doc:          kubelet + "evictionHard:\n  imagefs.available: 100%\n  nodefs.available: 0%\n",
			wantMinAge:   "2m0s",
			wantEviction: map[string]string{"imagefs.available": "100%", "nodefs.available": "0%"},
		},
		"100% beside a threshold that holds": {
			doc:          header + "imageGC:\n  evictionHard:\n    imagefs.available: 100%\n    nodefs.available: 10%\n",
			wantMinAge:   "2m0s",
			wantEviction: map[string]string{"imagefs.available": "100%", "nodefs.available": "10%"}, wantAt: 10 * gi,
		},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			ig := loaded.Config.ImageGC
			if got := ig.MinimumGCAge.Duration.String(); got != tc.wantMinAge {
				t.Errorf("minimumGCAge = %s, want %s", got, tc.wantMinAge)
			}
			if diff := cmp.Diff(tc.wantEviction, ig.EvictionHard); diff != "" {
				t.Errorf("evictionHard (-want +got):\n%s", diff)
			}
			at, _, ok := ig.DiskEviction(100 * gi)
			if ok != (tc.wantAt > 0) || at != tc.wantAt {
				t.Errorf("DiskEviction(100 GiB) = %d, %v; want %d, %v", at, ok, tc.wantAt, tc.wantAt > 0)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate() = %v", errs)
			}
		})
	}
}

// TestEvictionSoftFromKubelet: the kubelet starts evicting at a soft disk
// threshold (evictionSoft) once it has held for its grace period: nodegc
// takes the kubelet document's evictionSoft, and the stricter of the hard
// and soft thresholds decides its early start, its warning at start and
// its eviction gauge. Here imagefs.available 25% soft beside 15% hard: the
// kubelet evicts from 75% usage, not 85%. The nodegc document's own
// evictionSoft wins, as its evictionHard does; the kubelet's soft
// thresholds are taken whatever the nodegc document's evictionHard, a
// signal nodegc does not know is dropped with a warning, and one on inodes
// is a warning as in evictionHard.
func TestEvictionSoftFromKubelet(t *testing.T) {
	const kubelet = "---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" +
		"imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n"
	const soft = "evictionSoft:\n  imagefs.available: \"25%\"\nevictionSoftGracePeriod:\n  imagefs.available: 1m30s\n"
	nodegc := header + "imageGC:\n  highThresholdPercent: 80\n  lowThresholdPercent: 75\n"
	for name, tc := range map[string]struct {
		doc      string
		want     map[string]string
		wantAt   string
		warnings []string
	}{
		"the kubelet's": {doc: nodegc + kubelet + soft, want: map[string]string{"imagefs.available": "25%"}, wantAt: "evictionSoft imagefs.available<25%"},
		"beside nodegc's evictionHard": {doc: nodegc + "  evictionHard:\n    nodefs.available: 5%\n" + kubelet + soft,
			want: map[string]string{"imagefs.available": "25%"}, wantAt: "evictionSoft imagefs.available<25%"},
		"nodegc's wins": {doc: nodegc + "  evictionSoft:\n    nodefs.available: 20%\n" + kubelet + soft,
			want: map[string]string{"nodefs.available": "20%"}, wantAt: "evictionSoft nodefs.available<20%",
			warnings: []string{`line 6: imageGC.evictionSoft {"nodefs.available":"20%"} hides the KubeletConfiguration's evictionSoft ` +
				`{"imagefs.available":"25%"} (line 13): remove the line (or write null) to take the kubelet's`}},
		"none: the hard ones": {doc: nodegc + kubelet, want: map[string]string{}, wantAt: "evictionHard imagefs.available<15%"},
		"a signal nodegc does not know, one on inodes": {
			doc:    nodegc + kubelet + "evictionSoft:\n  someNewFs.available: 5%\n  nodefs.inodesFree: 10%\nevictionSoftGracePeriod:\n  nodefs.inodesFree: 1m\n",
			want:   map[string]string{"nodefs.inodesFree": "10%"},
			wantAt: "evictionHard imagefs.available<15%",
			warnings: []string{
				"line 12: evictionSoft[someNewFs.available] of the KubeletConfiguration is a signal nodegc does not know (a newer kubelet's?); ignored",
				"line 13: imageGC.evictionSoft[nodefs.inodesFree]: 10% is a signal on inodes; nodegc's image GC frees bytes, not inodes, " +
					"as the kubelet's image GC does (the kubelet's eviction manager removes unused images itself when inodes run short) (value from the KubeletConfiguration document)",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Errorf("Validate() = %v", errs)
			}
			ig := loaded.Config.ImageGC
			if diff := cmp.Diff(tc.want, ig.EvictionSoft); diff != "" {
				t.Errorf("evictionSoft (-want +got):\n%s", diff)
			}
			if _, which, ok := ig.DiskEviction(100 << 30); !ok || which.String() != tc.wantAt {
				t.Errorf("DiskEviction = %s (%v), want %s", which, ok, tc.wantAt)
			}
			if diff := cmp.Diff(tc.warnings, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEvictionSoftValidation: the nodegc document's evictionSoft is held
// to evictionHard's rules: a disk signal's value must parse, and a signal
// the kubelet does not know is refused.
func TestEvictionSoftValidation(t *testing.T) {
	c := Defaulted()
	c.ImageGC.EvictionSoft = map[string]string{"imagefs.available": "115%", "memory.available": "whatever", "imagefs.avaliable": "15%"}
	var got []string
	for _, e := range Validate(c) {
		got = append(got, e.Error())
	}
	want := []string{
		`imageGC.evictionSoft[imagefs.available]: Invalid value: "115%": percentage "115%": must be between 0% and 100%`,
		`imageGC.evictionSoft[imagefs.avaliable]: Unsupported value: "imagefs.avaliable": supported values: "allocatableMemory.available", "containerfs.available", "containerfs.inodesFree", "imagefs.available", "imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

// TestThresholdWithASpace: an eviction threshold with a space inside ("15 %",
// "10 Gi") is refused, as the kubelet refuses it, with a message that says
// the space is the problem and what to write, not that 15 is out of 0% to
// 100%. A space around the value is no problem, and a value that is wrong
// without its space gets the usual message.
func TestThresholdWithASpace(t *testing.T) {
	loaded, err := Decode([]byte(header + "imageGC:\n  evictionHard:\n    imagefs.available: 15 %\n    nodefs.available: \" 10%  \"\n" +
		"  evictionSoft:\n    imagefs.available: 10 Gi\n    nodefs.available: 1 0 x%\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`line 5: imageGC.evictionHard[imagefs.available]: Invalid value: "15 %": "15 %": the space is the problem: a threshold has none, and the kubelet refuses it too: write "15%"`,
		`line 8: imageGC.evictionSoft[imagefs.available]: Invalid value: "10 Gi": "10 Gi": the space is the problem: a threshold has none, and the kubelet refuses it too: write "10Gi"`,
		`line 9: imageGC.evictionSoft[nodefs.available]: Invalid value: "1 0 x%": percentage "1 0 x%": must be between 0% and 100%`,
	}
	if diff := cmp.Diff(want, loaded.Problems(Validate(loaded.Config))); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
