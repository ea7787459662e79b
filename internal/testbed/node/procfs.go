package node

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	mountPoint string
	fsType     string
	source     string
	options    string // super options
}

// parseMountInfo parses the text of /proc/self/mountinfo.
func parseMountInfo(data []byte) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		e := mountEntry{
			mountPoint: unescapeMountField(fields[4]),
			fsType:     fields[sep+1],
			source:     unescapeMountField(fields[sep+2]),
		}
		if len(fields) > sep+3 {
			e.options = fields[sep+3]
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// unescapeMountField undoes the octal escapes (\040 for space, \011, \012,
// \134) the kernel writes in mountinfo paths.
func unescapeMountField(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readMounts() ([]mountEntry, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(data)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(mounts []mountEntry, dir string) []string {
	var out []string
	for _, m := range mounts {
		if within(m.mountPoint, dir) {
			out = append(out, m.mountPoint)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return strings.Count(out[i], "/") > strings.Count(out[j], "/")
	})
	return out
}

// cgroupHierarchies returns the mount points of every cgroup (v1) and
// cgroup2 hierarchy, e.g. /sys/fs/cgroup/memory and /sys/fs/cgroup/unified.
func cgroupHierarchies(mounts []mountEntry) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range mounts {
		if (m.fsType == "cgroup" || m.fsType == "cgroup2") && !seen[m.mountPoint] {
			seen[m.mountPoint] = true
			out = append(out, m.mountPoint)
		}
	}
	return out
}

// proc identifies a process: a PID plus its start time, so that a PID
// reused by another process is not mistaken for it.
type proc struct {
	pid   int
	start uint64
	args  []string
}

// procStat returns the state letter and start time (in clock ticks) of pid.
func procStat(pid int) (state byte, start uint64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold spaces and ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	start, err = strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return fields[0][0], start, nil
}

func procArgs(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}

// processes lists the live (non-zombie) processes for which match is true.
func processes(match func(pid int, args []string) bool) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		args := procArgs(pid)
		if args == nil || !match(pid, args) {
			continue
		}
		state, start, err := procStat(pid)
		if err != nil || state == 'Z' {
			continue
		}
		out = append(out, proc{pid: pid, start: start, args: args})
	}
	return out
}

// alive reports whether p still runs (not exited, not a zombie, PID not
// reused).
func (p proc) alive() bool {
	state, start, err := procStat(p.pid)
	return err == nil && state != 'Z' && start == p.start
}

// flagValue returns the value following flag in args ("-address X" or
// "-address=X"), or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// isShimOf reports whether args are those of a containerd shim serving the
// containerd whose gRPC socket is socket.
func isShimOf(args []string, socket string) bool {
	return len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") &&
		flagValue(args, "-address") == socket
}

// cgroupProcsUnder returns the PIDs in the cgroup dir and its descendants.
func cgroupProcsUnder(dir string) []int {
	var pids []int
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// cgroupDirsDeepestFirst returns dir and every cgroup below it, children
// before parents.
func cgroupDirsDeepestFirst(dir string) []string {
	var dirs []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.SliceStable(dirs, func(i, j int) bool {
		return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/")
	})
	return dirs
}

// loopDevicesBackedBy returns the loop devices (/dev/loopN) whose backing
// file is at or below dir, including deleted backing files.
func loopDevicesBackedBy(dir string) []string {
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, m := range matches {
		data, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		backing := strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)")
		if within(backing, dir) {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(m))))
		}
	}
	return out
}
