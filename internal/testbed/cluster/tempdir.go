package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// dirPrefix starts the name of every cluster temp dir, followed by the PID
// of the test process that owns it: nodegc-kube-<pid>-<random>. The dir is
// short on purpose (no socket paths over 108 bytes, readable logs).
const dirPrefix = "nodegc-kube-"

// sweepStaleDirs removes the temp dirs of test processes that no longer
// exist (a test binary killed before its cleanup ran). Their children died
// with them (Pdeathsig); only the files remain. Dirs of live processes,
// including other test packages running now, are left alone.
func sweepStaleDirs(logf func(string, ...any)) {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range matches {
		rest := strings.TrimPrefix(filepath.Base(dir), dirPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive (or not ours to judge)
		}
		if err := os.RemoveAll(dir); err == nil {
			logf("removed %s left by dead test process %d", dir, pid)
		}
	}
}
