package containers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"
)

// logSuffix ends the kubelet's container log links.
const logSuffix = ".log"

// maxFileNameLen is ext4's file name limit; the kubelet cuts link names to it.
const maxFileNameLen = 255

// scanPodLogDirs lists the pod log directories (NAMESPACE_NAME_UID) under
// dir. Entries that are not directories or not named so are ignored. A
// missing dir is empty.
func scanPodLogDirs(dir string) ([]PodLogDir, error) {
	return scanDir(dir, "pod logs directory", func(e fs.DirEntry) (PodLogDir, bool) {
		uid, ok := podUIDFromLogDir(e.Name())
		if !ok || !e.IsDir() {
			return PodLogDir{}, false
		}
		info, err := e.Info()
		if err != nil {
			return PodLogDir{}, false // removed meanwhile
		}
		return PodLogDir{Name: e.Name(), PodUID: uid, ModTime: info.ModTime()}, true
	})
}

// scanDir lists dir, the what (for the error), and keeps what parse makes
// of its entries, in their order. A missing dir is empty.
func scanDir[T any](dir, what string, parse func(fs.DirEntry) (T, bool)) ([]T, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", what, dir, err)
	}
	var out []T
	for _, e := range entries {
		if v, ok := parse(e); ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// podUIDFromLogDir parses NAMESPACE_NAME_UID, as the kubelet names a pod's
// log directory: a namespace (a DNS label) and a pod name (a DNS
// subdomain), which cannot hold an underscore, and a UID that the API server
// made (a UUID) or the kubelet for a static pod (32 hex digits). Anything
// else under the directory is not a pod's, whatever its age.
func podUIDFromLogDir(name string) (string, bool) {
	parts := strings.Split(name, "_")
	if len(parts) != 3 || len(validation.IsDNS1123Label(parts[0])) > 0 || len(validation.IsDNS1123Subdomain(parts[1])) > 0 || !podUIDShaped(parts[2]) {
		return "", false
	}
	return parts[2], true
}

// podUIDShaped says whether uid is a UUID in its canonical form
// (8-4-4-4-12 lower-case hex digits) or 32 lower-case hex digits.
func podUIDShaped(uid string) bool {
	switch len(uid) {
	case 32:
		return staticPodUID(uid)
	case 36:
		return uid[8] == '-' && uid[13] == '-' && uid[18] == '-' && uid[23] == '-' &&
			lowerHex(uid[:8]+uid[9:13]+uid[14:18]+uid[19:23]+uid[24:])
	}
	return false
}

// staticPodUID says whether uid has the form the kubelet gives a static
// pod (32 hex digits, a hash of its manifest), which the API server never
// makes: a pod whose sandboxes the kubelet removed and whose mirror pod is
// missing is still known static by it.
func staticPodUID(uid string) bool { return len(uid) == 32 && lowerHex(uid) }

func lowerHex(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'f') }) < 0
}

// scanLogLinks lists the *.log symbolic links under dir and whether they
// dangle (readLink, targets under podLogsDir). A missing dir is empty.
func scanLogLinks(dir, podLogsDir string) ([]LogLink, error) {
	return scanDir(dir, "container logs directory", func(e fs.DirEntry) (LogLink, bool) {
		if e.Type()&fs.ModeSymlink == 0 || !strings.HasSuffix(e.Name(), logSuffix) {
			return LogLink{}, false
		}
		st := readLink(filepath.Join(dir, e.Name()), podLogsDir)
		return LogLink{
			Name:        e.Name(),
			ContainerID: containerIDFromLink(e.Name()),
			Dangling:    st.dangles,
			Elsewhere:   st.elsewhere,
			Target:      st.log,
		}, true
	})
}

// linkState is what one read of a symbolic link tells (readLink).
type linkState struct {
	// target is the link's target, made absolute; "" when the link
	// cannot be read.
	target string
	// dangles says the target does not exist. Only a target under
	// podLogsDir can be told: nodegc's container mounts the log
	// directories alone, so a target elsewhere (a kubelet podLogsDir
	// nodegc was not told, or a podLogsDirectory given as the resolved
	// path of a link the kubelet writes through) is missing there whether
	// or not it exists on the host. Such a link (elsewhere) does not
	// dangle; the kubelet, in the host's view, removes it if it does. Nor
	// does one whose target is reached through a symbolic link below
	// podLogsDir (a pod's log directory moved to another disk and linked
	// in its place), or cannot be looked up (presenceBelow): podLogsDir is
	// the right one, the path below it cannot be followed.
	dangles, elsewhere bool
	// log is whose log the target is (logTargetOf); nil when it is not a
	// container log as the kubelet lays them out under podLogsDir.
	log *LogTarget
}

// readLink reads the symbolic link at path, whose targets nodegc can tell
// under podLogsDir (see linkState).
func readLink(path, podLogsDir string) linkState {
	target, err := os.Readlink(path)
	if err != nil {
		return linkState{}
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(path), target)
	}
	st := linkState{target: target, log: logTargetOf(target, podLogsDir)}
	if podLogsDir != "" && !within(target, podLogsDir) {
		st.elsewhere = true
		return st
	}
	if podLogsDir == "" {
		_, err = os.Stat(path)
		st.dangles = errors.Is(err, fs.ErrNotExist)
		return st
	}
	st.dangles = presenceBelow(target, podLogsDir) == absent
	return st
}

// presence is what nodegc can tell of a path below the pod logs directory
// (presenceBelow).
type presence int

const (
	present presence = iota
	absent
	untold // cannot be told from nodegc's container
)

// presenceBelow says whether path, below podLogsDir, exists, looking up
// each of its components below podLogsDir with Lstat, so as to follow no
// symbolic link there. podLogsDir itself may be one (the path the kubelet
// writes through, given as is). But a symbolic link at or below a pod's
// log directory may lead where nodegc's container, which mounts the log
// directories alone, does not see (a pod's log directory moved to another
// disk and linked in its place): what lies below it cannot be told, and
// neither can a path whose lookup fails otherwise than with ENOENT
// (permission denied, a component that is not a directory), nor one that
// is not below podLogsDir. Only ENOENT on a component reached without a
// symbolic link says the path is absent.
func presenceBelow(path, podLogsDir string) presence {
	if podLogsDir == "" || !within(path, podLogsDir) {
		return untold
	}
	dir := filepath.Clean(podLogsDir)
	rel, err := filepath.Rel(dir, filepath.Clean(path))
	if err != nil {
		return untold
	}
	p := dir
	for _, name := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, name)
		info, err := os.Lstat(p)
		if errors.Is(err, unix.ENOENT) {
			return absent
		}
		if err != nil || info.Mode()&fs.ModeSymlink != 0 {
			return untold
		}
	}
	return present
}

// logTargetOf says whose log path is, when it is a container log as the
// kubelet lays them out under podLogsDir:
// <namespace>_<pod>_<uid>/<container>/<attempt>.log, the attempt being the
// container's restart count; nil otherwise.
func logTargetOf(path, podLogsDir string) *LogTarget {
	if podLogsDir == "" || !within(path, podLogsDir) {
		return nil
	}
	rel, err := filepath.Rel(filepath.Clean(podLogsDir), filepath.Clean(path))
	if err != nil {
		return nil
	}
	parts := strings.Split(rel, string(filepath.Separator))
	if len(parts) != 3 || len(validation.IsDNS1123Label(parts[1])) > 0 {
		return nil
	}
	uid, ok := podUIDFromLogDir(parts[0])
	if !ok {
		return nil
	}
	n, ok := strings.CutSuffix(parts[2], logSuffix)
	attempt, err := strconv.ParseUint(n, 10, 32)
	if !ok || err != nil || strconv.FormatUint(attempt, 10) != n {
		return nil
	}
	return &LogTarget{PodUID: uid, Container: parts[1], Attempt: uint32(attempt)}
}

// containerIDFromLink parses POD_NAMESPACE_CONTAINER-ID.log; "" when the
// name has no ID (cut by the length limit, or not the kubelet's).
func containerIDFromLink(name string) string {
	base, ok := strings.CutSuffix(name, logSuffix)
	i := strings.LastIndexByte(base, '-')
	if !ok || i < 0 {
		return ""
	}
	return base[i+1:]
}

// legacyLinkName is the name of the kubelet's link to a container's log
// under the container logs directory (kuberuntime's logSymlink).
func legacyLinkName(podName, podNamespace, containerName, containerID string) string {
	name := fmt.Sprintf("%s_%s_%s-%s", podName, podNamespace, containerName, containerID)
	if len(name) > maxFileNameLen-len(logSuffix) {
		name = name[:maxFileNameLen-len(logSuffix)]
	}
	return name + logSuffix
}

// within says whether path lies strictly inside dir (both cleaned).
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && filepath.IsAbs(path) && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// plainName says whether name is a single path element, safe to join to a
// directory.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsRune(name, '/')
}

// removeContainerLogs does what the kubelet does before it removes a
// container: it removes the container's log file and its rotated siblings
// (LOGPATH*), and its link in the container logs directory. A log path
// outside podLogsDir is left alone: nodegc deletes files only where the
// kubelet keeps logs. Files already gone are fine.
func removeContainerLogs(logPath, podLogsDir, containerLogsDir string, c *Container) error {
	var errs []error
	d, base, err := openLogDir(logPath, podLogsDir)
	if err != nil {
		errs = append(errs, fmt.Errorf("log files of container %s: %w", c.ID, err))
	}
	if d != nil {
		names, err := logNames(d, base)
		if err != nil {
			errs = append(errs, fmt.Errorf("log files of container %s: %w", c.ID, err))
		}
		for _, n := range names {
			if err := unix.Unlinkat(int(d.Fd()), n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing log file of container %s (%s): %w", c.ID, n, err))
			}
		}
		d.Close()
	}
	if link, ok := linkOf(containerLogsDir, c); ok && linkIsOwn(link, logPath, podLogsDir, c) {
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing log link of container %s: %w", c.ID, err))
		}
	}
	return errors.Join(errs...)
}

// linkIsOwn says whether link, the name of the link of container c whose
// log path is logPath ("" when unknown), is a symbolic link that is c's to
// remove: its name keeps at least minLinkIDPrefix characters of c's ID
// (the kubelet's own link, whatever it points at), or it points at
// logPath, or it dangles (readLink) and its target is not the log of
// another instance of c's container. With a long pod name, namespace and
// container name the kubelet's 255-byte cut leaves less of the ID, or
// none: every instance of the container has that link name, and the link
// the kubelet made for one of them (a running or newer instance's,
// pointing at its log, which is missing for a moment while the kubelet
// rotates it) is not another's to remove.
func linkIsOwn(link, logPath, podLogsDir string, c *Container) bool {
	info, err := os.Lstat(link)
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	if named := containerIDFromLink(filepath.Base(link)); len(named) >= minLinkIDPrefix && strings.HasPrefix(c.ID, named) {
		return true
	}
	st := readLink(link, podLogsDir)
	if st.target != "" && logPath != "" && filepath.Clean(st.target) == filepath.Clean(logPath) {
		return true
	}
	if !st.dangles {
		return false
	}
	if st.log != nil && *st.log != (LogTarget{PodUID: c.PodUID, Container: c.Name, Attempt: c.Attempt}) {
		return false // another instance's: the plan's dangling links judge it
	}
	return true
}

// linkOf is the path of c's link under containerLogsDir, if its labels are
// names the API server gives (a pod name is a DNS subdomain, a namespace
// and a container name DNS labels): they are whatever created the
// container through the runtime wrote, and a pod name with path elements,
// long enough for the cut to drop the container's ID, would name any file
// (the kubelet joins them as they are). A container whose labels are not
// such names has no link of the kubelet's.
func linkOf(containerLogsDir string, c *Container) (string, bool) {
	if containerLogsDir == "" || len(validation.IsDNS1123Subdomain(c.PodName)) > 0 ||
		len(validation.IsDNS1123Label(c.PodNamespace)) > 0 || len(validation.IsDNS1123Label(c.Name)) > 0 {
		return "", false
	}
	name := legacyLinkName(c.PodName, c.PodNamespace, c.Name, c.ID)
	if !plainName(name) {
		return "", false
	}
	return filepath.Join(containerLogsDir, name), true
}
