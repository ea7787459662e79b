package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
)

// unreadableRecords is fakeRecords whose images in unreadable have a
// storage the runtime cannot read (TopLayer fails with the image's own
// error).
type unreadableRecords struct {
	fakeRecords
	umu        sync.Mutex
	unreadable map[string]bool
}

func (f *unreadableRecords) TopLayer(ctx context.Context, img *Image) (string, error) {
	f.umu.Lock()
	broken := f.unreadable[img.ID]
	f.umu.Unlock()
	if broken {
		return "", imageOwn(ctx, fmt.Errorf("layers of image %s: reading rootfs of config %s: %w", img.ID, img.ID, errdefs.ErrNotFound))
	}
	return f.fakeRecords.TopLayer(ctx, img)
}

func (f *unreadableRecords) breaks(id string) {
	f.umu.Lock()
	f.unreadable[id] = true
	f.umu.Unlock()
}

// TestUnreadableImageKeptAndTheRunGoesOn: while records of containers
// exist (which tell only the top layer they were made on), an image whose
// storage the runtime cannot read cannot be told unused by them: the plan
// keeps it (unreadable), and so does the check before its removal when it
// became unreadable after the plan; neither fails, and the other images go.
// It is logged once while it stays unreadable, and counted by the keep
// reason (the skipped gauge, the check's outcomes).
func TestUnreadableImageKeptAndTheRunGoesOn(t *testing.T) {
	images := func() []*runtimeapi.Image {
		return threeImages()
	}
	tops := map[string]string{"sha256:aa": "chain-a", "sha256:bb": "chain-b", "sha256:cc": "chain-c"}
	for _, atTheCheck := range []bool{false, true} {
		name := "at the plan"
		if atTheCheck {
			name = "at the check"
		}
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			ctx := klog.NewContext(t.Context(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
			rt := &removalsRuntime{images: images()}
			recs := &unreadableRecords{fakeRecords: fakeRecords{tops: tops}, unreadable: map[string]bool{}}
			recs.set(ContainerRecords{Layers: map[string]bool{"chain-x": true}}, nil, nil)
			if atTheCheck {
				rt.onRemove = func(string) { recs.breaks("sha256:bb") }
			} else {
				recs.breaks("sha256:bb")
			}
			m := everythingNeeded(t, Options{Runtime: statusRuntime{rt}, ContainerRecords: recs})
			for run := range 2 {
				r, err := m.GarbageCollect(ctx, TriggerManual)
				var fe *FreeDiskSpaceError
				if err != nil && !errors.As(err, &fe) {
					t.Fatalf("run %d: %v", run, err)
				}
				kept := map[string]string{}
				for _, d := range r.Plan.Keep {
					kept[d.Image.ID] = d.Reason
				}
				for _, d := range r.Outcome.Skipped {
					kept[d.Image.ID] = "check: " + d.Reason
				}
				want := map[string]string{"sha256:bb": KeepUnreadable}
				if atTheCheck && run == 0 {
					want["sha256:bb"] = "check: " + KeepUnreadable
				}
				if diff := cmp.Diff(want, kept); diff != "" {
					t.Errorf("run %d kept (-want +got):\n%s", run, diff)
				}
			}
			if diff := cmp.Diff([]string{"sha256:aa", "sha256:cc"}, rt.removed); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
			if got := testutil.ToFloat64(m.metrics.skipped.WithLabelValues(KeepUnreadable)); got != 1 {
				t.Errorf("skipped gauge, reason %s: %v, want 1", KeepUnreadable, got)
			}
			wantChecks := 0.0
			if atTheCheck {
				wantChecks = 1
			}
			if got := testutil.ToFloat64(m.metrics.checkOutcomes.WithLabelValues(checkKept, KeepUnreadable)); got != wantChecks {
				t.Errorf("check outcomes kept/%s: %v, want %v", KeepUnreadable, got, wantChecks)
			}
			if got := strings.Count(logs.String(), "cannot read what an image holds"); got != 1 {
				t.Errorf("%d log lines of the unreadable image in two runs, want 1:\n%s", got, logs.String())
			}
		})
	}
}

// TestUnreadableIsTheImagesOwnError: a read of an image's storage that
// fails for the image (a blob or record not found, content that does not
// decode) is the image's own (ErrImageUnreadable: the image is kept, the
// plan goes on); one that fails because containerd could not be asked
// (unavailable, timed out, cancelled) is not: the plan fails, as for any
// runtime that does not answer.
func TestUnreadableIsTheImagesOwnError(t *testing.T) {
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		own  bool
	}{
		{"config blob not found", t.Context(), fmt.Errorf("content digest sha256:aa: %w", errdefs.ErrNotFound), true},
		{"no config for this platform", t.Context(), errors.New("no image config found for this platform"), true},
		{"decoding", t.Context(), errors.New("invalid character 'x' looking for beginning of value"), true},
		{"unavailable", t.Context(), fmt.Errorf("content digest sha256:aa: %w", errdefs.ErrUnavailable), false},
		{"gRPC unavailable", t.Context(), status.Error(codes.Unavailable, "connection refused"), false},
		{"deadline", t.Context(), fmt.Errorf("reading: %w", context.DeadlineExceeded), false},
		{"call ended", ended, fmt.Errorf("content digest sha256:aa: %w", errdefs.ErrNotFound), false},
	} {
		if got := errors.Is(imageOwn(tc.ctx, tc.err), ErrImageUnreadable); got != tc.own {
			t.Errorf("%s: the image's own %v, want %v", tc.name, got, tc.own)
		}
	}
}
