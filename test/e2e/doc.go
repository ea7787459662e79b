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
// node's loopback (both must run with the GOMAXPROCS their manifest sets
// from the CPU limit, as the kubelet resolves it). Then it restarts
// containerd under the running DaemonSet (a new process and a new socket
// file): nodegc must collect a deleted pod's dead container and sandbox
// within two container GC periods, as before, without its own pod being
// restarted and with /healthz ok throughout. It logs, for each collector,
// what was removed and what was kept and why.
//
// The disk guardian's proofs:
//
//   - DiskPressureKubelet and DiskPressureNodegc, side by side on the same
//     node with the same fill. Unused images pulled through CRI fill the
//     image filesystem to 77% and age past imageMinimumGCAge (30s in the
//     kubelet and nodegc alike); then 5 fresh unused images (15% of the disk)
//     are pulled back to back, which would take it to 92%, past the kubelet's
//     eviction threshold (its defaults imagefs.available<15%,
//     nodefs.available<10%, on in both runs, with
//     evictionPressureTransitionPeriod 30s; the kubelet's root directory,
//     its nodefs, is a 256 MiB filesystem of its own, so the host disk's
//     usage plays no part), if nothing reclaimed. Two
//     ordinary pods run. Every 200ms the runs sample usage (statfs), the
//     Node's DiskPressure condition and evicted pods. Run (a), first, before
//     nodegc is deployed: the kubelet's own image GC with its defaults
//     (85/80, its 5-minute loop) and eviction; its numbers are the baseline,
//     measured, not asserted. Run (b), last: the kubelet's image GC off,
//     nodegc at 80/75 with the kubelet's KubeletConfiguration appended to its
//     config file (whence its evictionHard and minimum age); it must keep the
//     Node out of DiskPressure with no eviction, and bring usage back under
//     75% within 5s of crossing 80%. Run (b) logs the (a)/(b) table. The
//     kubelet is restarted with each run's settings and back
//     (kubecluster.RestartKubelet), nodegc's pod with its configuration and
//     back.
//   - ScheduledImageKept: a pod whose init container runs for a minute and
//     whose app image (imagePullPolicy Never) is pulled through CRI
//     meanwhile; unused images on top take the image filesystem over the
//     high threshold, more than they hold must go, and nodegc's run removes
//     every unused image but that one, kept with reason scheduled (its plan,
//     run in its pod, and nodegc_image_gc_images_skipped); the app container
//     then starts from it.
//   - ContainerGCBytes: a finished pod whose container wrote 24 MiB to its
//     writable layer and 2 MiB to its log is deleted; the bytes nodegc's
//     container GC reports for its removals
//     (nodegc_container_gc_bytes_freed_total by kind) match within 5%.
//
// Last, HelmInstall: the kubectl-applied manifest is deleted (and its pods
// gone), and the chart deploy/helm/nodegc installed with `helm install
// --create-namespace` and values for the node (image, socket, containerd
// root, pod logs and state directories, ports). The test node's
// adaptations are made by Helm's post-renderer, which is this test binary
// itself (TestMain, with NODEGC_E2E_POST_RENDER set), through the same code
// as for the manifest. The node agent must connect to the runtime, the owner
// collector lead and sync and collect one ConfigMap whose owner is deleted,
// both at the GOMAXPROCS of their CPU limit;
// `helm uninstall` must then remove the release's objects.
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
