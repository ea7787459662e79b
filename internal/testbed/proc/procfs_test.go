package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMemory(t *testing.T) {
	for name, tc := range map[string]struct {
		status  string
		want    Memory
		wantErr string
	}{
		"both": {status: "Name:\tnodegc\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t9\n",
			want: Memory{RSS: 1 << 20, HWM: 2 << 20}},
		"kernel thread":  {status: "Name:\tkthreadd\nThreads:\t1\n", wantErr: "no VmRSS"},
		"malformed":      {status: "VmHWM:\t12 kB\nVmRSS:\t12\n", wantErr: "malformed VmRSS"},
		"not a number":   {status: "VmHWM:\tx kB\nVmRSS:\t12 kB\n", wantErr: "VmHWM"},
		"other Vm lines": {status: "VmRSSX:\t1 kB\nVmHWM:\t4 kB\nVmRSS:\t3 kB\n", want: Memory{RSS: 3 << 10, HWM: 4 << 10}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseMemory([]byte(tc.status))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseMemory = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseCPUTime(t *testing.T) {
	for name, tc := range map[string]struct {
		stat    string
		want    time.Duration
		wantErr bool
	}{
		// utime 250, stime 50 ticks: 3s.
		"plain":               {stat: "42 (nodegc) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0", want: 3 * time.Second},
		"spaces in the name":  {stat: "42 (a b) c) R 1 42 42 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 0 0", want: 100 * time.Millisecond},
		"too short":           {stat: "42 (x) S 1 2 3", wantErr: true},
		"no command name":     {stat: "42 x S 1", wantErr: true},
		"a field not numeric": {stat: "42 (x) S 1 42 42 0 -1 0 0 0 0 0 u 3 0 0 20 0 1 0 1 0 0", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseCPUTime([]byte(tc.stat))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseCPUTime = %v, %v; want %v (error: %t)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestReadSelf reads this test process's own memory and CPU time.
func TestReadSelf(t *testing.T) {
	m, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS == 0 || m.HWM < m.RSS {
		t.Errorf("ReadMemory(self) = %+v: want 0 < RSS <= HWM", m)
	}
	if _, err := ReadCPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

// TestWaitLogLine: a line written after the wait began is found, the first
// of the substrings that matches is reported, and a process that exits
// without writing it ends the wait with an error.
func TestWaitLogLine(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("writer", "/bin/sh", []string{"-c", `echo start; sleep 0.3; printf 'partial '; sleep 0.3; echo 'all resource monitors have synced'; sleep 300`}, nil, filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = p.Stop(time.Second) })
	line, which, err := p.WaitLogLine(t.Context(), 20*time.Millisecond, "not all resource monitors", "all resource monitors have synced")
	if err != nil {
		t.Fatal(err)
	}
	if which != 1 || line != "partial all resource monitors have synced" {
		t.Errorf("WaitLogLine = %q, %d; want the whole line, substring 1", line, which)
	}

	q, err := Start("quiet", "/bin/sh", []string{"-c", "echo nothing; exit 3"}, nil, filepath.Join(dir, "quiet.log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.WaitLogLine(t.Context(), 20*time.Millisecond, "synced"); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("WaitLogLine on a process that exits = %v, want an error saying it exited", err)
	}
}

// TestKlogTime: the header's time in local time, the year that puts it
// nearest the reference (across New Year both ways), and no time from a
// line without a klog header.
func TestKlogTime(t *testing.T) {
	at := func(y int, m time.Month, d, h, min, s, us int) time.Time {
		return time.Date(y, m, d, h, min, s, us*1000, time.Local)
	}
	for _, tc := range []struct {
		line string
		near time.Time
		want time.Time
	}{
		{`I1129 09:12:07.123456   42 runtime.go:53] "Reconnected"`, at(2026, 11, 29, 9, 13, 0, 0), at(2026, 11, 29, 9, 12, 7, 123456)},
		{`E1231 23:59:59.500000   42 x.go:1] "late"`, at(2027, 1, 1, 0, 0, 1, 0), at(2026, 12, 31, 23, 59, 59, 500000)},
		{`W0101 00:00:00.250000   42 x.go:1] "early"`, at(2026, 12, 31, 23, 59, 58, 0), at(2027, 1, 1, 0, 0, 0, 250000)},
	} {
		got, ok := KlogTime(tc.line, tc.near)
		if !ok || !got.Equal(tc.want) {
			t.Errorf("KlogTime(%q, %v) = %v, %v; want %v", tc.line, tc.near, got, ok, tc.want)
		}
	}
	for _, line := range []string{"", "starting", "I1129", `X1129 09:12:07.123456 x`, `I1329 09:12:07.123456 x`} {
		if got, ok := KlogTime(line, time.Now()); ok {
			t.Errorf("KlogTime(%q) = %v, true; want no time", line, got)
		}
	}
}
