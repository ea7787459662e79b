package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// EvictionThreshold is one of the kubelet's eviction thresholds on
// available space: a percentage of capacity or a quantity of bytes.
type EvictionThreshold struct {
	// Percent is set for a threshold written "15%".
	Percent float64
	// Bytes is set for a threshold written as a quantity ("2Gi").
	Bytes uint64
	// IsPercent tells which of the two the threshold is.
	IsPercent bool
}

// ParseEvictionThreshold parses a value of the kubelet's evictionHard or
// evictionSoft: a percentage between 0% and 100%, or a non-negative
// quantity. A space inside ("15 %", "10 Gi") is refused, as the kubelet
// refuses it, with an error that says so.
func ParseEvictionThreshold(v string) (EvictionThreshold, error) {
	v = strings.TrimSpace(v)
	if joined := strings.Join(strings.Fields(v), ""); joined != v {
		if _, err := ParseEvictionThreshold(joined); err == nil {
			return EvictionThreshold{}, fmt.Errorf("%q: the space is the problem: a threshold has none, and the kubelet refuses it too: write %q", v, joined)
		}
	}
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
			return EvictionThreshold{}, fmt.Errorf("percentage %q: must be between 0%% and 100%%", v)
		}
		return EvictionThreshold{Percent: f, IsPercent: true}, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return EvictionThreshold{}, fmt.Errorf("%q: must be a percentage (\"15%%\") or a quantity (\"2Gi\")", v)
	}
	if q.Sign() < 0 {
		return EvictionThreshold{}, fmt.Errorf("quantity %q: must not be negative", v)
	}
	return EvictionThreshold{Bytes: uint64(q.Value())}, nil
}

// signalOff reports whether an evictionHard or evictionSoft value turns
// its signal off: the kubelet reads "0%" and "100%" so (not as "evict
// always").
func signalOff(v string) bool {
	v = strings.TrimSpace(v)
	return v == "0%" || v == "100%"
}

// Available returns the available bytes under which the threshold is met on
// a filesystem of that capacity.
func (t EvictionThreshold) Available(capacity uint64) uint64 {
	if t.IsPercent {
		return uint64(float64(capacity) * t.Percent / 100)
	}
	return t.Bytes
}

// String writes the threshold as the kubelet's configuration does.
func (t EvictionThreshold) String() string {
	if t.IsPercent {
		return strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
	}
	return resource.NewQuantity(int64(min(t.Bytes, math.MaxInt64)), resource.BinarySI).String()
}

// kubeletSignals are the eviction signals the kubelet knows (its eviction
// API's Signal values, Kubernetes 1.34); it refuses a configuration with
// any other.
var kubeletSignals = []string{
	"allocatableMemory.available", "containerfs.available", "containerfs.inodesFree", "imagefs.available",
	"imagefs.inodesFree", "memory.available", "nodefs.available", "nodefs.inodesFree", "pid.available",
}

// diskSignals are the eviction signals about the image filesystem's
// available space nodegc reads: imagefs.available for a dedicated image
// filesystem, nodefs.available for the node's root one.
var diskSignals = []string{SignalImageFsAvailable, SignalNodeFsAvailable}

// DiskThreshold is one of the kubelet's eviction thresholds on the image
// filesystem's available space: which map of the configuration gives it,
// its signal and its value.
type DiskThreshold struct {
	// Field is "evictionHard" or "evictionSoft".
	Field string
	// Signal is imagefs.available or nodefs.available.
	Signal    string
	Threshold EvictionThreshold
}

// Soft says whether the kubelet evicts on the threshold only once it has
// held for its grace period (evictionSoftGracePeriod).
func (t DiskThreshold) Soft() bool { return t.Field == "evictionSoft" }

// String writes the threshold as "evictionSoft imagefs.available<25%".
func (t DiskThreshold) String() string {
	return fmt.Sprintf("%s %s<%s", t.Field, t.Signal, t.Threshold)
}

// DiskEviction returns the stricter of the kubelet's thresholds on the
// image filesystem's available space, hard (evictionHard) and soft
// (evictionSoft), for a filesystem of that capacity: the available bytes
// under which the kubelet evicts (right away, or after the soft
// threshold's grace period), and the threshold that says so; a soft one
// only when it is strictly stricter than every hard one. ok is false when
// neither map sets one (or turns them off: signalOff). Values must be
// valid (Validate).
func (c *ImageGCConfiguration) DiskEviction(capacity uint64) (available uint64, t DiskThreshold, ok bool) {
	c.eachThreshold(diskSignals, func(field, signal, v string) {
		if signalOff(v) {
			return
		}
		th, err := ParseEvictionThreshold(v)
		if err != nil {
			return
		}
		if a := th.Available(capacity); !ok || a > available {
			available, t, ok = a, DiskThreshold{Field: field, Signal: signal, Threshold: th}, true
		}
	})
	return available, t, ok
}

// eachThreshold calls f with each of signals that evictionHard, then
// evictionSoft, sets (to a value that turns it off too), in the order of
// signals: the field's name, the signal and its value.
func (c *ImageGCConfiguration) eachThreshold(signals []string, f func(field, signal, value string)) {
	for _, m := range []struct {
		field      string
		thresholds map[string]string
	}{{"evictionHard", c.EvictionHard}, {"evictionSoft", c.EvictionSoft}} {
		for _, s := range signals {
			if v, set := m.thresholds[s]; set {
				f(m.field, s, v)
			}
		}
	}
}
