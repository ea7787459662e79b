package app

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodegc/nodegc/internal/agent"
	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/pkg/containers"
	"github.com/nodegc/nodegc/pkg/images"
)

// serveCRI serves rt (none: a gRPC server without the CRI services, as
// containerd with its cri plugin disabled is) on a socket of its own, and
// returns a configuration file whose runtime it is.
func serveCRI(t *testing.T, rt runtimeapi.RuntimeServiceServer) string {
	t.Helper()
	endpoint := testbed.ServeCRI(t, rt)
	return writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n"+
		"containerRuntimeEndpoint: "+endpoint+"\nstateDirectory: "+t.TempDir()+"\n")
}

// TestPlanWithoutAPlanFails: `nodegc plan` that could make neither the
// image plan nor the container plan (the runtime answers Version, not its
// list calls) still prints why, and exits 1, with -o json too: a script
// that reads "nothing to remove" from its output must see it failed.
func TestPlanWithoutAPlanFails(t *testing.T) {
	cfg := serveCRI(t, testbed.VersionOnly{Runtime: "test", RuntimeVersion: "0"})
	code, out, errOut := runMain(t, "", "plan", "-c", cfg)
	if code != 1 || !strings.Contains(out, "IMAGES: no plan: ") || !strings.Contains(out, "CONTAINERS: no plan: ") {
		t.Errorf("plan, neither plan made: code %d, want 1 after printing both errors; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "", "plan", "-c", cfg, "-o", "json")
	var view planView
	if err := json.Unmarshal([]byte(out), &view); err != nil || view.ImagesErr == "" || view.ContainerErr == "" {
		t.Errorf("plan -o json, neither plan made: %v; stdout:\n%s", err, out)
	}
	if code != 1 {
		t.Errorf("plan -o json, neither plan made: code %d, want 1; stderr:\n%s", code, errOut)
	}
}

// TestPlanExitCodes: plan exits 0 with both plans, 2 with one of them
// missing, 1 with neither or when it was interrupted (SIGINT, SIGTERM),
// whatever it printed: the README's Commands section says so.
func TestPlanExitCodes(t *testing.T) {
	failed := errors.New("listing containers: failed")
	img, ctr := &images.Plan{}, &containers.Plan{}
	live := t.Context()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		r    agent.PlanReport
		want int
		why  string
	}{
		{"both plans", live, agent.PlanReport{Images: img, Containers: ctr}, 0, ""},
		{"no image plan", live, agent.PlanReport{ImagesErr: failed, Containers: ctr}, 2, "no image plan"},
		{"no container plan", live, agent.PlanReport{Images: img, ContainersErr: failed}, 2, "no container plan"},
		{"neither", live, agent.PlanReport{ImagesErr: failed, ContainersErr: failed}, 1, "no image plan and no container plan"},
		{"interrupted", cancelled, agent.PlanReport{Images: img, ContainersErr: failed}, 1, "interrupted"},
		{"interrupted with both", cancelled, agent.PlanReport{Images: img, Containers: ctr}, 1, "interrupted"},
	}
	for _, c := range cases {
		code, why := planExitCode(c.ctx, &c.r)
		if code != c.want || !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("%s: exit code %d (%q), want %d (%q)", c.name, code, why, c.want, c.why)
		}
	}
}

// TestPlanNamesARuntimeWithoutCRI: plan against a socket that serves no
// CRI v1 RuntimeService (Docker's containerd, its cri plugin disabled,
// beside cri-dockerd) says so and which field to change, not "is the
// runtime running, and may this user open its socket?": it runs, and the
// socket opened. A socket that is not there keeps that question.
func TestPlanNamesARuntimeWithoutCRI(t *testing.T) {
	code, _, errOut := runMain(t, "", "plan", "-c", serveCRI(t, nil))
	if code != 1 || !strings.Contains(errOut, "this socket serves no CRI v1 RuntimeService") ||
		!strings.Contains(errOut, "set containerRuntimeEndpoint to the kubelet's --container-runtime-endpoint") ||
		strings.Contains(errOut, "may this user open its socket") {
		t.Errorf("plan, no CRI on the socket: code %d, stderr %q; want 1 and the field to change", code, errOut)
	}
	absent := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n"+
		"containerRuntimeEndpoint: unix://"+filepath.Join(t.TempDir(), "absent.sock")+"\nstateDirectory: "+t.TempDir()+"\n")
	code, _, errOut = runMain(t, "", "plan", "-c", absent)
	if code != 1 || !strings.Contains(errOut, "is the runtime at unix://") || !strings.Contains(errOut, "may this user open its socket?") {
		t.Errorf("plan, no socket: code %d, stderr %q; want 1 and the question", code, errOut)
	}
}

// TestRunBindFailureNamesTheSource: an address run cannot listen on is
// named with what set it, a line of the file or a flag, for the operator
// of a crash-looping hostNetwork agent to know what to change.
func TestRunBindFailureNamesTheSource(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	file := writeFile(t, "apiVersion: nodegc.io/v1alpha1\nkind: NodeGCConfiguration\n"+
		"metricsBindAddress: \""+addr+"\"\nhealthzBindAddress: \"127.0.0.1:0\"\n"+
		"containerRuntimeEndpoint: unix://"+filepath.Join(t.TempDir(), "absent.sock")+"\nstateDirectory: "+t.TempDir()+"\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--owner-gc=off", "-c", file}, "listening on " + addr + " (metricsBindAddress, line 3 of " + file + "): "},
		{[]string{"run", "--owner-gc=off", "-c", file, "--metrics-bind-address=127.0.0.1:0", "--healthz-bind-address=" + addr},
			"listening on " + addr + " (healthzBindAddress, from --healthz-bind-address): "},
	} {
		code, _, errOut := runMain(t, "", c.args...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d, stderr %q; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}
