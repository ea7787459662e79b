// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at the
// version pinned in hack/versions.sh (ETCD_VERSION). It exists because
// `go install go.etcd.io/etcd/server/v3@...` is refused (the etcd modules carry
// replace directives). Built by hack/install-tools.sh into _output/tools/bin/etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
