// Package e2e is nodegc's end-to-end suite: nodegc deployed as an operator
// deploys it, on a real single-node cluster built from modules
// (internal/testbed/kubecluster: etcd, kube-apiserver,
// kube-controller-manager without its garbage collector, kube-scheduler,
// containerd 2.x and a kubelet).
//
// The suite pushes the image `make image` built (_output/image/nodegc.tar,
// or $NODEGC_E2E_IMAGE_TAR) to the node's registry, renders
// deploy/daemonset.yaml for the node with hack/render-deploy.sh (image,
// runtime socket, containerd root, pod logs and state directories, ports),
// applies it with `kubectl apply -f` and waits for the DaemonSet pod to be
// Running and Ready and for the owner collector to hold its Lease. Then,
// with pods created through the API so that the kubelet makes their
// containers, it checks the three collectors on the real node: the owner GC
// (a Deployment deleted with Background propagation loses its ReplicaSet and
// Pods), the container GC (dead instances of a restarting container, and
// the containers, sandbox and log directory of a deleted pod) and the image
// GC (the image filesystem above the high threshold comes back under the low
// one, images of running pods stay; an in-use image too big to free gets
// FreeDiskSpaceFailed on the Node), and reads /metrics of the agents on the
// node's loopback. Last, it restarts containerd under the running DaemonSet
// (a new process and a new socket file): nodegc must collect a deleted
// pod's dead container and sandbox within two container GC periods, as
// before, without its own pod being restarted and with /healthz ok
// throughout. It logs, for each collector, what was removed and what was
// kept and why.
//
// The tests need root and the test-bed binaries (`make tools`) and carry the
// e2e build tag, so `make test` leaves them out. Run them with
//
//	hack/e2e.sh                      # make image, then go test -tags e2e ./test/e2e/
//	go test -tags e2e -v ./test/e2e/ # with an image built already
//
// What the test cluster lacks and the suite adapts, beyond the documented
// substitutions of hack/render-deploy.sh, is listed at adaptForTestNode.
package e2e
