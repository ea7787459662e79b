package cri_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/node"
	"github.com/nodegc/nodegc/internal/testbed/registry"
	"github.com/nodegc/nodegc/pkg/cri"
)

// TestClientSurvivesRuntimeRestart, for each real containerd: one
// cri.Client, dialed once, across a SIGKILL of containerd and its restart,
// then a graceful restart (SIGTERM). Each restart removes the socket file
// and makes a new one at the same path. While containerd is down, calls
// fail as Unavailable and nodegc_cri_connected is 0; once it is back, the
// same Client answers and lists the container that survived in its shim,
// nodegc_cri_connected is 1 again and nodegc_cri_reconnects_total counts
// one reconnect per restart.
func TestClientSurvivesRuntimeRestart(t *testing.T) {
	testbed.RequireRoot(t)
	for _, v := range testbed.ContainerdVersions {
		t.Run("containerd"+string(v), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			n := node.Start(t, node.Options{Version: v})
			reg := prometheus.NewPedanticRegistry()
			c, err := cri.Dial(ctx, cri.Options{RuntimeEndpoint: n.Endpoint, Timeout: 10 * time.Second, Metrics: cri.NewMetrics(reg)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			img, err := n.Registry.Push(ctx, registry.ImageSpec{Repo: "cri/restart", Tag: "v1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.PullImage(ctx, img.Ref); err != nil {
				t.Fatal(err)
			}
			pod, err := n.RunPod(ctx, node.PodSpec{Name: "survivor", Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			survivor, err := n.RunContainer(ctx, pod, node.ContainerSpec{Name: "c", Image: img.Ref, Args: []string{"sleep"}})
			if err != nil {
				t.Fatal(err)
			}
			waitMetric := func(name string, want float64) {
				t.Helper()
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				var got float64
				var ok bool
				err := testbed.Poll(ctx, 20*time.Millisecond, func(context.Context) (bool, error) {
					families, err := reg.Gather()
					if err != nil {
						return false, err
					}
					got, ok = testbed.MetricSum(families, name)
					return ok && got == want, nil
				})
				if err != nil {
					t.Fatalf("%s = %v (exported: %t), want %v within 10s: %v", name, got, ok, want, err)
				}
			}
			waitMetric("nodegc_cri_connected", 1)

			for i, restart := range []struct {
				name string
				stop func() error
			}{
				{"SIGKILL", n.Kill9},
				{"SIGTERM", func() error { return nil }}, // Restart stops it itself
			} {
				if err := restart.stop(); err != nil {
					t.Fatal(err)
				}
				if restart.name == "SIGKILL" {
					if _, err := c.Version(ctx); !cri.IsUnavailable(err) {
						t.Errorf("%s: Version while containerd is down = %v, want Unavailable", restart.name, err)
					}
					waitMetric("nodegc_cri_connected", 0)
				}
				if err := n.Restart(ctx); err != nil {
					t.Fatal(err)
				}
				back := time.Now()
				// The client redials by itself: no call is needed.
				waitMetric("nodegc_cri_connected", 1)
				t.Logf("after %s and restart: nodegc's client connected again %v after containerd answered", restart.name, time.Since(back).Round(time.Millisecond))
				if _, err := c.Version(ctx); err != nil {
					t.Fatalf("after %s and restart: Version through the same client: %v", restart.name, err)
				}
				cs, err := c.ListContainers(ctx, &runtimeapi.ContainerFilter{Id: survivor})
				if err != nil || len(cs) != 1 || cs[0].GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("after %s and restart: ListContainers(%s) = %v, %v; want it running", restart.name, survivor, cs, err)
				}
				waitMetric("nodegc_cri_reconnects_total", float64(i+1))
			}
		})
	}
}
