package agent

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/klog/v2"

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
}

// readRuntimeProfile asks the runtime for its profile: Version as the
// client last read it, the verbose Status for the sandbox image, and
// ImageFsInfo.
func readRuntimeProfile(ctx context.Context, c *cri.Client) runtimeProfile {
	v := c.RuntimeVersion()
	p := runtimeProfile{name: v.GetRuntimeName(), version: v.GetRuntimeVersion()}
	var why []string
	failed := func(fact string, err error) {
		p.unread = append(p.unread, fact)
		why = append(why, fmt.Sprintf("%s: %v", fact, err))
	}
	if s, err := c.SandboxImage(ctx); err != nil {
		failed("sandbox image", err)
	} else {
		p.sandboxImage = s
	}
	if info, err := c.ImageFsInfo(ctx); err != nil {
		failed("image filesystem", err)
	} else if fss := info.GetImageFilesystems(); len(fss) > 0 {
		p.imageFs = fss[0].GetFsId().GetMountpoint()
	}
	p.why = strings.Join(why, "; ")
	return p
}

// logUnread says what the GC is built without.
func (p runtimeProfile) logUnread(logger klog.Logger) {
	if len(p.unread) > 0 {
		logger.Info("Cannot read all of the container runtime's configuration; without its sandbox image the image GC relies on the pinned flag, without its image filesystem on CRI sizes; read again every 30s until it answers", "unread", p.why)
	}
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
	diff("unread", strings.Join(p.unread, ", "), strings.Join(now.unread, ", "))
	return out
}
