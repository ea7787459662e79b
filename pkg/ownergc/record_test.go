package ownergc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	"k8s.io/utils/clock"
)

func testRecordID(ns, name, uid string) objectID {
	return objectID{uid: types.UID(uid), apiVersion: "v1", kind: "ConfigMap", namespace: ns, name: name}
}

func deleteRecord(rule string) decisionRecord {
	return decisionRecord{action: actDelete, policy: metav1.DeletePropagationBackground, rule: rule,
		owners: []ownerRecord{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "o-1", Class: "dangling", Reason: reasonDeleted}}}
}

// uids lists the objects of kept records, oldest first.
func uids(recs []keptRecord) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s@%s", r.id.uid, r.rec.rule))
	}
	return out
}

func TestRecordStoreFind(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var s recordStore
	s.add(start, testRecordID("ns", "a", "a-1"), deleteRecord("r1"), false)
	s.add(start.Add(time.Second), testRecordID("ns", "b", "b-1"), deleteRecord("r2"), false)
	s.add(start.Add(2*time.Second), testRecordID("ns", "a", "a-2"), deleteRecord("r3"), true) // recreated: same name, new UID
	s.add(start.Add(3*time.Second), testRecordID("other", "a", "a-3"), deleteRecord("r4"), false)
	now := start.Add(time.Minute)

	tests := map[string]struct {
		uid  types.UID
		id   objectID
		want []string
	}{
		"by UID only":                    {uid: "a-1", want: []string{"a-1@r1"}},
		"by name: every UID of the name": {id: testRecordID("ns", "a", ""), want: []string{"a-1@r1", "a-2@r3"}},
		"by UID and name, no duplicates": {uid: "a-2", id: testRecordID("ns", "a", ""), want: []string{"a-1@r1", "a-2@r3"}},
		"namespace tells names apart":    {id: testRecordID("other", "a", ""), want: []string{"a-3@r4"}},
		"kind tells names apart": {id: objectID{apiVersion: "apps/v1", kind: "ConfigMap", namespace: "ns", name: "a"},
			want: []string{}},
		"version does not": {id: objectID{apiVersion: "v2", kind: "ConfigMap", namespace: "ns", name: "b"},
			want: []string{"b-1@r2"}},
		"nothing": {uid: "nope", want: []string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, uids(s.find(now, tc.uid, tc.id))); diff != "" {
				t.Errorf("find (-want +got):\n%s", diff)
			}
		})
	}
	got := s.find(now, "a-2", objectID{})
	if len(got) != 1 || !got[0].dryRun || !got[0].at.Equal(start.Add(2*time.Second)) || got[0].rec.policy != metav1.DeletePropagationBackground {
		t.Errorf("the dry-run record as kept: %+v", got)
	}
}

// The store keeps at most maxCount records and none older than maxAge,
// dropping the oldest first; its indexes drop with them.
func TestRecordStoreBounds(t *testing.T) {
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	s := recordStore{maxAge: time.Hour, maxCount: 3}
	for i := range 5 {
		s.add(start.Add(time.Duration(i)*time.Minute), testRecordID("ns", fmt.Sprint("o", i), fmt.Sprint(i)), deleteRecord("r"), false)
	}
	now := start.Add(5 * time.Minute)
	if got := s.len(); got != 3 {
		t.Errorf("%d records kept, want 3 (the count bound)", got)
	}
	for i, want := range []int{0, 0, 1, 1, 1} {
		if got := len(s.find(now, types.UID(fmt.Sprint(i)), testRecordID("ns", fmt.Sprint("o", i), ""))); got != want {
			t.Errorf("record %d: found %d, want %d", i, got, want)
		}
	}

	// An hour after the third record it is too old; the last two are not.
	now = start.Add(2*time.Minute + time.Hour)
	if diff := cmp.Diff([]string{"3@r"}, uids(s.find(now, "3", objectID{}))); diff != "" {
		t.Errorf("find (-want +got):\n%s", diff)
	}
	if got := s.find(now, "2", objectID{}); len(got) != 0 {
		t.Errorf("a record older than maxAge was found: %+v", got)
	}
	if got := s.len(); got != 2 {
		t.Errorf("%d records kept after the age bound, want 2", got)
	}
	// Adding prunes by age too, and the indexes hold nothing dropped.
	s.add(start.Add(3*time.Hour), testRecordID("ns", "new", "new"), deleteRecord("r"), false)
	if s.len() != 1 || len(s.byUID) != 1 || len(s.byName) != 1 {
		t.Errorf("after pruning: %d records, %d UIDs, %d names indexed; want 1 each", s.len(), len(s.byUID), len(s.byName))
	}
}

// The default bounds are the documented ones.
func TestRecordStoreDefaultBounds(t *testing.T) {
	var s recordStore
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range recordKeepCount + 10 {
		s.add(start, testRecordID("ns", "o", fmt.Sprint(i)), deleteRecord("r"), false)
	}
	if s.len() != recordKeepCount {
		t.Errorf("%d records kept, want %d", s.len(), recordKeepCount)
	}
	if got := s.find(start.Add(recordKeepAge+time.Second), "20", objectID{}); len(got) != 0 {
		t.Errorf("a record older than %s was found", recordKeepAge)
	}
	if recordKeepAge != time.Hour || recordKeepCount != 10000 {
		t.Errorf("bounds %s and %d; the docs say 1h and 10000", recordKeepAge, recordKeepCount)
	}
}

// BenchmarkRecord measures recording one delete as a worker does after the
// API server accepted it: the metric, the klog line (to a file, as klog
// writes to its output in production) and the record kept for explain.
func BenchmarkRecord(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	klog.LogToStderr(false)
	klog.SetOutput(f)
	b.Cleanup(func() {
		klog.Flush()
		klog.LogToStderr(true)
		_ = f.Close()
	})
	c := &Collector{clock: clock.RealClock{}}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	r := &run{c: c, logger: klog.Background().WithName("ownergc")}
	rec := deleteRecord("owner-absent")
	ids := make([]objectID, 1000)
	for i := range ids {
		ids[i] = testRecordID("cascade-1234abcd", fmt.Sprintf("d-%06d", i), string(uuid.NewUUID()))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.record(ids[i%len(ids)], rec)
		i++
	}
}

// The record line carries every field of the decision, in klog's text
// format (textlogger shares klog's serialization of values): the object,
// its identity, the action with its policy or finalizer, the rule, the
// owners as JSON and dryRun. The policy and the finalizer appear only with
// the actions that have them.
func TestRecordLine(t *testing.T) {
	var out bytes.Buffer
	c := &Collector{clock: clock.RealClock{}}
	c.metrics = newMetrics(prometheus.NewRegistry(), c)
	r := &run{c: c, logger: textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&out)))}
	id := testRecordID("cascade", "d-000001", "d-uid")

	r.record(id, deleteRecord("owner-absent"))
	r.recordDryRun(id, decisionRecord{action: actRemoveFinalizer, finalizer: metav1.FinalizerDeleteDependents, rule: "dependents-gone"})

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines logged, want 2:\n%s", len(lines), out.String())
	}
	want := [][]string{
		{`"Owner GC action"`, `object="cascade/d-000001"`, `apiVersion="v1"`, `kind="ConfigMap"`, `uid="d-uid"`,
			`action="delete"`, `propagationPolicy="Background"`, `rule="owner-absent"`,
			`owners=[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"o-1","class":"dangling","reason":"` + reasonDeleted + `"}]`,
			`dryRun=false`},
		{`"Owner GC action"`, `action="remove-finalizer"`, `finalizer="foregroundDeletion"`, `rule="dependents-gone"`,
			`owners=null`, `dryRun=true`}, // no owner decides the removal of a finalizer
	}
	for i, line := range lines {
		for _, w := range want[i] {
			if !strings.Contains(line, w) {
				t.Errorf("line %d lacks %s:\n%s", i+1, w, line)
			}
		}
	}
	if strings.Contains(lines[0], "finalizer=") || strings.Contains(lines[1], "propagationPolicy=") {
		t.Errorf("a field of another action was logged:\n%s", out.String())
	}
}
