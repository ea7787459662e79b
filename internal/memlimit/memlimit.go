// Package memlimit keeps the Go runtime's soft memory limit below the
// container's hard one.
//
// The Helm chart and deploy/daemonset.yaml set GOMEMLIMIT from the
// container's limits.memory with a resourceFieldRef, which can only give the
// whole limit (a divisor rounds, it cannot take 90%). At 100% the Go
// collector pushes back only once the cgroup is full already, when the
// kernel reclaims and then OOM-kills; Go's guidance is a soft limit some
// 5-10% under the hard one, for the memory Go does not count (thread stacks
// outside the heap's accounting, cgo, the page cache the cgroup charges).
// Adjust lowers a GOMEMLIMIT at or above the cgroup's memory limit to
// Fraction of that limit; a GOMEMLIMIT below it is the operator's choice and
// kept, and without GOMEMLIMIT nothing is changed.
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Fraction is the share of the cgroup's memory limit Adjust sets the soft
// limit to.
const Fraction = 0.9

// Result says what Adjust did.
type Result struct {
	// Changed is set when the soft limit was lowered.
	Changed bool
	// Before and After are the soft limit before and after, in bytes.
	Before, After int64
	// CgroupLimit is the cgroup's memory limit in bytes, 0 when there is
	// none; CgroupFile the file it was read from.
	CgroupLimit int64
	CgroupFile  string
}

// Adjust lowers the Go runtime's soft memory limit to Fraction of the
// cgroup's memory limit when GOMEMLIMIT was set at or above that limit.
func Adjust() (Result, error) {
	if v := os.Getenv("GOMEMLIMIT"); v == "" || v == "off" {
		return Result{}, nil
	}
	cgroups, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return Result{}, err
	}
	limit, file, err := cgroupLimit("/sys/fs/cgroup", cgroups)
	if err != nil {
		return Result{}, err
	}
	current := debug.SetMemoryLimit(-1)
	r := Result{Before: current, After: current, CgroupLimit: limit, CgroupFile: file}
	if target, ok := lowered(current, limit); ok {
		debug.SetMemoryLimit(target)
		r.After, r.Changed = target, true
	}
	return r, nil
}

// lowered returns the soft limit to set, and whether to set it: Fraction
// of the cgroup's limit when the current soft limit is at or above it (the
// kernel rounds memory.max down to a page, so the limit GOMEMLIMIT was set
// to may be a little above what the cgroup reports).
func lowered(current, cgroupLimit int64) (int64, bool) {
	if cgroupLimit <= 0 || current < cgroupLimit {
		return 0, false
	}
	return int64(float64(cgroupLimit) * Fraction), true
}

// noLimit is where a cgroup v1 memory.limit_in_bytes means no limit (the
// kernel reports 2^63-1 rounded down to a page).
const noLimit = 1 << 62

// cgroupLimit returns the memory limit of this process's cgroup, read under
// root (the cgroup filesystem's mount point) from the paths procSelfCgroup
// (the content of /proc/self/cgroup) names; 0 without a limit. cgroup v2's
// memory.max is read, else v1's memory.limit_in_bytes; each at the
// process's cgroup path, and at the mount's root, which a container with
// its own cgroup namespace (or v1's per-container mount) sees as its own.
func cgroupLimit(root string, procSelfCgroup []byte) (limit int64, file string, err error) {
	var candidates []string
	sc := bufio.NewScanner(bytes.NewReader(procSelfCgroup))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			candidates = append(candidates, filepath.Join(root, parts[2], "memory.max"), filepath.Join(root, "memory.max"),
				filepath.Join(root, "unified", parts[2], "memory.max"))
		case hasController(parts[1], "memory"):
			candidates = append(candidates, filepath.Join(root, "memory", parts[2], "memory.limit_in_bytes"),
				filepath.Join(root, "memory", "memory.limit_in_bytes"))
		}
	}
	// v1's memory controller before a v2 hierarchy without it (hybrid).
	for _, v1 := range []bool{true, false} {
		for _, c := range candidates {
			if strings.HasSuffix(c, "memory.limit_in_bytes") != v1 {
				continue
			}
			data, err := os.ReadFile(c)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, c, err
			}
			v := strings.TrimSpace(string(data))
			if v == "max" {
				return 0, c, nil
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, c, fmt.Errorf("%s: %q is not a memory limit", c, v)
			}
			if n >= noLimit {
				n = 0
			}
			return n, c, nil
		}
	}
	return 0, "", nil
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
