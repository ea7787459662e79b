// Package version holds the build identity of nodegc, stamped at link time:
//
//	go build -ldflags "-X github.com/nodegc/nodegc/internal/version.version=v0.1.0 \
//	  -X github.com/nodegc/nodegc/internal/version.commit=$(git rev-parse HEAD)"
package version
