package kubecluster

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// artifactDirer is *testing.T's ArtifactDir (Go 1.26): a directory kept
// under -outputdir when `go test -artifacts` is given, else removed after
// the test.
type artifactDirer interface{ ArtifactDir() string }

// saveArtifacts copies what explains a run into dir before the teardown
// removes the node directory: the kubelet's and kube-scheduler's logs and
// config, containerd's log and config, and the pod logs directory (the
// containers' own logs, nodegc's agents included). Files only; symbolic
// links and sockets are skipped. It returns how many files it copied.
func (c *Cluster) saveArtifacts(dir string) int {
	n := 0
	copyTree := func(src, dst string) {
		filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return nil
			}
			if copyFile(p, filepath.Join(dst, rel)) == nil {
				n++
			}
			return nil
		})
	}
	copyTree(c.Dir, filepath.Join(dir, "kube"))
	copyTree(c.PodLogsDir, filepath.Join(dir, "pods"))
	for _, f := range []string{"containerd.log", "config.toml"} {
		if copyFile(filepath.Join(c.Node.Dir, f), filepath.Join(dir, "containerd", f)) == nil {
			n++
		}
	}
	return n
}

func copyFile(src, dst string) error {
	if strings.HasSuffix(src, ".key") { // certificates' keys stay behind
		return fs.ErrPermission
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
