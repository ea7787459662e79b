package proc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, 100 on
// Linux whatever the kernel's HZ).
const userHZ = 100

// Memory is a process's resident memory as /proc/PID/status reports it.
type Memory struct {
	// RSS is VmRSS: resident now, in bytes.
	RSS uint64
	// HWM is VmHWM: the peak of RSS since the process started, in bytes.
	HWM uint64
}

// ReadMemory reads VmRSS and VmHWM of process pid.
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return parseMemory(data)
}

// parseMemory reads the VmRSS and VmHWM lines ("VmRSS:   123 kB") of the
// text of /proc/PID/status.
func parseMemory(status []byte) (Memory, error) {
	var m Memory
	var seen int
	for line := range strings.Lines(string(status)) {
		var dst *uint64
		key, rest, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			continue
		case key == "VmRSS":
			dst = &m.RSS
		case key == "VmHWM":
			dst = &m.HWM
		default:
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return Memory{}, fmt.Errorf("/proc status: malformed %s line %q", key, strings.TrimSpace(line))
		}
		kib, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc status: %s: %w", key, err)
		}
		*dst = kib << 10
		seen++
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("/proc status: no VmRSS or VmHWM line (a kernel thread, or a zombie)")
	}
	return m, nil
}

// ReadCPUTime returns the user + system CPU time process pid has used.
func ReadCPUTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseCPUTime(data)
}

// parseCPUTime reads utime and stime (fields 14 and 15) of the text of
// /proc/PID/stat.
func parseCPUTime(stat []byte) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses: count
	// from its last ")".
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %q", stat)
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] { // fields 14 and 15: the state is field 3
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// WaitLogLine reads the process's log every interval until a line
// contains one of substrs, and returns that line and the index of the
// substring it contains (the first one that matches, in the order given).
// It fails when the process exits first or ctx ends.
func (p *Process) WaitLogLine(ctx context.Context, interval time.Duration, substrs ...string) (line string, which int, err error) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var offset int64 // lines before it have been searched
	for {
		exited := p.Exited() // checked before the read: a line written before the exit is found
		var found bool
		line, which, offset, found, err = searchLog(p.LogPath, offset, substrs)
		if err != nil || found {
			return line, which, err
		}
		if exited {
			return "", -1, fmt.Errorf("%s exited (%v) before its log said %q", p.Name, p.err, substrs)
		}
		select {
		case <-ctx.Done():
			return "", -1, fmt.Errorf("%s: waiting for %q in %s: %w", p.Name, substrs, p.LogPath, ctx.Err())
		case <-ticker.C:
		}
	}
}

// searchLog searches the complete lines of path from offset on for one
// containing one of substrs. next is the offset of the first line not yet
// searched (a partial last line is searched again next time).
func searchLog(path string, offset int64, substrs []string) (line string, which int, next int64, found bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", -1, offset, false, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return "", -1, offset, false, err
	}
	r := bufio.NewReaderSize(f, 64<<10)
	next = offset
	for {
		text, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) { // a partial line, or none
			return "", -1, next, false, nil
		}
		if err != nil {
			return "", -1, next, false, err
		}
		next += int64(len(text))
		for i, s := range substrs {
			if strings.Contains(text, s) {
				return strings.TrimSuffix(text, "\n"), i, next, true, nil
			}
		}
	}
}

// KlogTime returns the time in the klog header of line ("I1123
// 22:49:21.123456 ..."; severity I, W, E or F). klog writes local time
// without the year: it is the year that puts the time nearest near (a line
// of 31 December read on 1 January is of the year before).
func KlogTime(line string, near time.Time) (time.Time, bool) {
	if len(line) < 21 || !strings.ContainsRune("IWEF", rune(line[0])) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	best := t.AddDate(near.Year(), 0, 0)
	for _, y := range []int{near.Year() - 1, near.Year() + 1} {
		if c := t.AddDate(y, 0, 0); c.Sub(near).Abs() < best.Sub(near).Abs() {
			best = c
		}
	}
	return best, true
}
