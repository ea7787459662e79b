package version

import (
	"fmt"
	"runtime"
)

// Set by -ldflags -X; see the Makefile.
var (
	version = "v0.0.0-dev"
	commit  = "unknown"
)

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// Get returns the build identity of this binary.
func Get() Info {
	return Info{
		Version:   version,
		Commit:    commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func (i Info) String() string {
	return fmt.Sprintf("nodegc %s (commit %s, %s, %s)", i.Version, i.Commit, i.GoVersion, i.Platform)
}
