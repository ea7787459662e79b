package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestSweepStaleDirs(t *testing.T) {
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, dead.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "etcd.log"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(stale); _ = os.RemoveAll(live) })

	sweepStaleDirs(t.Logf)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir of dead process %d: stat error %v, want it removed", dead.Process.Pid, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("dir of this live process was touched: %v", err)
	}
}
