package agent

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodegc/nodegc/internal/containerdapi"
	"github.com/nodegc/nodegc/pkg/cri"
)

// runtimeProfile is what the image and container GC are built for: which
// runtime answers, and what its configuration says that they rely on. A
// runtime reads its configuration at start only, so the profile can change
// only across a loss of the connection; it is read again at each return.
type runtimeProfile struct {
	name, version string
	// sandboxImage is the pause image as the runtime's config writes it
	// ("" when the runtime does not say): never removed, whether or not a
	// sandbox runs it.
	sandboxImage string
	// imageFs is the image filesystem's mountpoint CRI reports: where
	// containerd's snapshots are, and which snapshotter unpacked them.
	imageFs string
	// unread names the facts the runtime did not give ("sandbox image",
	// "image filesystem"); one read later counts as a change. why says
	// why, for the log.
	unread []string
	why    string
	// generation is the generation of the client's connection
	// (cri.Client.Generation) the profile was read on: what it says may
	// not hold after a loss of the connection since.
	generation uint64
}

// Facts of a runtime's profile that may go unread (runtimeProfile.unread).
const (
	factSandboxImage = "sandbox image"
	factImageFs      = "image filesystem"
	// factContainerdAPI: containerd's own API on its socket, which gives
	// the image GC exact layer accounting, image arrival times, the
	// images of the pod sandboxes and the disk checks after writes, and
	// the container GC the writable layers' bytes.
	factContainerdAPI = "containerd API"
)

// readRuntimeProfile asks the runtime for its profile: Version as the
// client last read it, the verbose Status for the sandbox image, and
// ImageFsInfo, each within timeout; on containerd, given apiSocket, whether
// its own API answers there, within RuntimeCheckTimeout at most (it answers
// at once, or not: a socket where nothing listens waits out the deadline).
func readRuntimeProfile(ctx context.Context, c *cri.Client, apiSocket string, timeout time.Duration) runtimeProfile {
	// The generation before anything is read: a loss of the connection
	// during the reads makes the profile one of the connection before.
	gen := c.Generation()
	v := c.RuntimeVersion()
	p := runtimeProfile{name: v.GetRuntimeName(), version: v.GetRuntimeVersion(), generation: gen}
	var why []string
	failed := func(fact string, err error) {
		p.unread = append(p.unread, fact)
		why = append(why, fmt.Sprintf("%s: %v", fact, err))
	}
	if p.name == "containerd" && apiSocket != "" {
		if api, err := containerdapi.Dial(ctx, apiSocket, min(timeout, RuntimeCheckTimeout)); err != nil {
			failed(factContainerdAPI, err)
		} else {
			api.Close()
		}
	}
	if s, err := c.SandboxImage(ctx); err != nil {
		failed(factSandboxImage, err)
	} else {
		p.sandboxImage = s
	}
	if info, err := c.ImageFsInfo(ctx); err != nil {
		failed(factImageFs, err)
	} else if fss := info.GetImageFilesystems(); len(fss) > 0 {
		p.imageFs = fss[0].GetFsId().GetMountpoint()
	}
	p.why = strings.Join(why, "; ")
	return p
}

// logUnread says what the GC is built without.
func (p runtimeProfile) logUnread(logger klog.Logger) {
	if len(p.unread) > 0 {
		logger.Info("Cannot read all of the container runtime's configuration; without its sandbox image the image GC relies on the pinned flag and the sandboxes, without its image filesystem on CRI sizes, without containerd's own API on the sandbox image remembered in the state file, CRI sizes and the disk check interval; read again every 30s until it answers", "unread", p.why)
	}
}

// sandboxImageUnread says whether the profile lacks the runtime's sandbox
// image where the runtime reports one: containerd 1.x (config.sandboxImage
// in its verbose status; containerd 2.x reports none, and cri.Client reads
// no other runtime's). The image GC removes nothing then: it would run
// without the image its pods' sandboxes are made from (a new one pulled
// ahead of a restart, say).
func (p runtimeProfile) sandboxImageUnread() bool {
	if p.name != "containerd" || !slices.Contains(p.unread, factSandboxImage) {
		return false
	}
	major, _, _ := strings.Cut(strings.TrimPrefix(p.version, "v"), ".")
	n, err := strconv.Atoi(major)
	return err != nil || n < 2 // a version not understood: in doubt
}

// apiUnread records that containerd's own API did not answer a GC's dial
// at build (once, whichever GC tells first): the profile then counts it
// unread, so that it is asked again (and the GCs built again once it
// answers).
func (p *runtimeProfile) apiUnread(err error) {
	if slices.Contains(p.unread, factContainerdAPI) {
		return
	}
	p.unread = append(p.unread, factContainerdAPI)
	p.why = strings.TrimPrefix(p.why+"; "+fmt.Sprintf("%s: %v", factContainerdAPI, err), "; ")
}

// changes lists what differs from p in now, as "what: was → now".
func (p runtimeProfile) changes(now runtimeProfile) []string {
	var out []string
	diff := func(what, was, is string) {
		if was != is {
			out = append(out, fmt.Sprintf("%s: %q → %q", what, was, is))
		}
	}
	diff("runtime", p.name+" "+p.version, now.name+" "+now.version)
	diff("sandbox image", p.sandboxImage, now.sandboxImage)
	diff("image filesystem", p.imageFs, now.imageFs)
	diff("unread", strings.Join(slices.Sorted(slices.Values(p.unread)), ", "), strings.Join(slices.Sorted(slices.Values(now.unread)), ", "))
	return out
}
