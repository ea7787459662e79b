package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// EvictionThreshold is one of the kubelet's hard eviction thresholds on
// available space: a percentage of capacity or a quantity of bytes.
type EvictionThreshold struct {
	// Percent is set for a threshold written "15%".
	Percent float64
	// Bytes is set for a threshold written as a quantity ("2Gi").
	Bytes uint64
	// IsPercent tells which of the two the threshold is.
	IsPercent bool
}

// ParseEvictionThreshold parses a value of the kubelet's evictionHard: a
// percentage between 0% and 100%, or a non-negative quantity.
func ParseEvictionThreshold(v string) (EvictionThreshold, error) {
	v = strings.TrimSpace(v)
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

// signalOff reports whether an evictionHard value turns its signal off: the
// kubelet reads "0%" and "100%" so (not as "evict always").
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

// diskSignals are the evictionHard signals about the image filesystem's
// available space nodegc reads: imagefs.available for a dedicated image
// filesystem, nodefs.available for the node's root one.
var diskSignals = []string{SignalImageFsAvailable, SignalNodeFsAvailable}

// DiskEviction returns the stricter of the evictionHard thresholds on the
// image filesystem's available space for a filesystem of that capacity:
// the available bytes under which the kubelet evicts, and the signal and
// threshold that say so. ok is false when evictionHard sets none (or turns
// them off: signalOff). Values must be valid (Validate).
func (c *ImageGCConfiguration) DiskEviction(capacity uint64) (available uint64, signal string, t EvictionThreshold, ok bool) {
	for _, s := range diskSignals {
		v, set := c.EvictionHard[s]
		if !set || signalOff(v) {
			continue
		}
		th, err := ParseEvictionThreshold(v)
		if err != nil {
			continue
		}
		if a := th.Available(capacity); !ok || a > available {
			available, signal, t, ok = a, s, th, true
		}
	}
	return available, signal, t, ok
}
