package proc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestStopKillsGroupIgnoringSIGTERM: a process group that ignores SIGTERM
// (as a kube-apiserver once did for over a minute) gets SIGKILL after the
// grace period, children included.
func TestStopKillsGroupIgnoringSIGTERM(t *testing.T) {
	dir := t.TempDir()
	childPID := filepath.Join(dir, "child.pid")
	script := `trap '' TERM; sleep 300 & echo $! > "$1"; wait`
	p, err := Start("stubborn", "/bin/sh", []string{"-c", script, "sh", childPID}, nil, filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		data, err := os.ReadFile(childPID)
		if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
			return false, nil
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("child pid: %v", err)
	}

	begin := time.Now()
	killed, err := p.Stop(300 * time.Millisecond)
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !killed {
		t.Errorf("stop reported no SIGKILL for a process ignoring SIGTERM")
	}
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("stop took %s, less than the SIGTERM grace period", took)
	}
	if !p.Exited() {
		t.Errorf("process not reaped after stop")
	}
	// The grandchild is reaped by init, not us: dead means gone or a zombie.
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
		if os.IsNotExist(err) {
			return true, nil
		}
		_, after, _ := bytes.Cut(stat, []byte(") "))
		return bytes.HasPrefix(after, []byte("Z")), nil
	})
	if err != nil {
		t.Errorf("child %d of the group still alive after stop: %v", child, err)
	}
}

func TestStopAfterExit(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("true", "/bin/true", nil, nil, filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if killed, err := p.Stop(time.Second); killed || err != nil {
		t.Errorf("stop of an exited process = (%t, %v), want (false, nil)", killed, err)
	}
}
