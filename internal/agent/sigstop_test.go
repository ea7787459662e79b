package agent_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/pkg/ownergc"
)

// The lease timings are the defaults (15s, 10s, 2s): a 20 s stop outlasts
// the lease.
const sigstopConfig = `apiVersion: nodegc.io/v1alpha1
kind: NodeGCConfiguration
containerRuntimeEndpoint: unix:///nonexistent/nodegc-test/cri.sock
stateDirectory: %s
ownerGC:
  kubeAPIQPS: 30
  kubeAPIBurst: 30
leaderElection:
  leaderElect: true
  resourceName: nodegc-sigstop
  resourceNamespace: default
`

// auditPolicy records every write, once, when its response is complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
- level: None
`

// TestSIGSTOPLeaderMidCascade: two `nodegc run --owner-gc=auto` processes;
// the leader is stopped (SIGSTOP) for 20 s in the middle of a cascade, so
// that the other takes the lease, then continued (SIGCONT). The API
// server's audit log shows that the stopped instance wrote nothing after
// the other acquired the lease (its attempts to renew the lease may only
// have been refused with 409), and the cascade completes. Each instance
// talks to the API server as a user of its own (impersonation), so the
// audit log tells their requests apart whatever their user agents.
func TestSIGSTOPLeaderMidCascade(t *testing.T) {
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cluster.Start(t, cluster.Options{APIServerFlags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog}})
	ctx := t.Context()
	users := map[string]string{"node-a": "nodegc-a", "node-b": "nodegc-b"}
	a := startNodegc(t, "node-a", fmt.Sprintf(sigstopConfig, t.TempDir()), "--owner-gc=auto", "--kubeconfig", kubeconfigAs(t, c, users["node-a"]))
	b := startNodegc(t, "node-b", fmt.Sprintf(sigstopConfig, t.TempDir()), "--owner-gc=auto", "--kubeconfig", kubeconfigAs(t, c, users["node-b"]))
	var stopped, other *proc
	testbed.WaitFor(t, time.Minute, "one leader", func() bool {
		switch {
		case a.metric("nodegc_owner_gc_leader") == 1:
			stopped, other = a, b
		case b.metric("nodegc_owner_gc_leader") == 1:
			stopped, other = b, a
		}
		return stopped != nil
	})
	testbed.WaitFor(t, time.Minute, "the leader's owner GC to sync", func() bool { return stopped.metric("nodegc_owner_gc_synced") == 1 })
	lease, err := c.Client().CoordinationV1().Leases("default").Get(ctx, "nodegc-sigstop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stoppedIdentity := ptr.Deref(lease.Spec.HolderIdentity, "")

	const n = 1500
	owner, _, remaining := cascade(t, c, n)
	if err := c.Client().CoreV1().ConfigMaps("default").Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	testbed.WaitFor(t, time.Minute, "the cascade to be under way", func() bool { r := remaining(); return r >= 0 && r < n-100 })

	failedWrites := func(p *proc) float64 {
		var sum float64
		for _, verb := range []string{"DELETE", "PATCH", "POST", "PUT"} {
			sum += p.metric("nodegc_owner_gc_api_requests_total", "verb="+verb, "code=error")
		}
		return sum
	}
	failedBefore := failedWrites(stopped)
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopAt := time.Now()
	left := remaining()
	t.Logf("stopped %s (SIGSTOP) with %d of %d dependents left", stopped.name, left, n)
	testbed.WaitFor(t, time.Minute, "the other instance to take the lease", func() bool { return other.metric("nodegc_owner_gc_leader") == 1 })
	t.Logf("%s leads %v after the SIGSTOP", other.name, time.Since(stopAt).Round(time.Millisecond))
	select {
	case <-time.After(time.Until(stopAt.Add(20 * time.Second))):
	case <-ctx.Done():
		t.Fatal("test ended while the leader was stopped")
	}
	if err := stopped.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	contAt := time.Now()
	testbed.WaitFor(t, time.Minute, "the continued instance to say it does not lead", func() bool { return stopped.metric("nodegc_owner_gc_leader") == 0 })
	testbed.WaitFor(t, 3*time.Minute, "the cascade to finish", func() bool { return remaining() == 0 })
	if _, err := c.Client().CoreV1().ConfigMaps("default").Get(ctx, owner.Name, metav1.GetOptions{}); err == nil {
		t.Error("the owner still exists")
	}
	failed := failedWrites(stopped) - failedBefore
	refused, story := stoppedLog(t, stopped)

	// What the API server saw.
	events := readAudit(t, auditLog)
	stoppedUser, otherUser := users[stopped.name], users[other.name]
	var acquired time.Time
	for _, e := range events {
		if e.ImpersonatedUser.Username == otherUser && e.ObjectRef.Resource == "leases" && e.ResponseStatus.Code/100 == 2 {
			acquired = e.RequestReceivedTimestamp
			break
		}
	}
	if acquired.IsZero() {
		t.Fatalf("the audit log shows no successful lease write by %s", otherUser)
	}
	var (
		lastWrite                          time.Time
		collectorWrites, leaseConflicts    int
		late                               []string
		wrongAgents                        = map[string]int{}
		wantAgent                          = ownergc.UserAgent + "/" + stoppedIdentity
		stoppedCollector, stoppedLeaseSeen bool
	)
	for _, e := range events {
		if e.ImpersonatedUser.Username != stoppedUser {
			continue
		}
		isLease := e.ObjectRef.Resource == "leases"
		isCollector := strings.HasPrefix(e.UserAgent, ownergc.UserAgent)
		if !isLease && !isCollector {
			continue // the node agent's own writes (Node events)
		}
		if isCollector {
			stoppedCollector = true
			collectorWrites++
			lastWrite = e.RequestReceivedTimestamp
			if e.UserAgent != wantAgent {
				wrongAgents[e.UserAgent]++
			}
		}
		if isLease {
			stoppedLeaseSeen = true
		}
		if e.RequestReceivedTimestamp.Before(acquired) {
			continue
		}
		if isLease && e.ResponseStatus.Code == 409 {
			leaseConflicts++
			continue
		}
		late = append(late, fmt.Sprintf("%s %s %s/%s %d (%s), %v after %s acquired the lease",
			e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.ResponseStatus.Code, e.UserAgent,
			e.RequestReceivedTimestamp.Sub(acquired).Round(time.Millisecond), other.name))
	}
	if !stoppedCollector || !stoppedLeaseSeen {
		t.Fatalf("the audit log holds no collector write (%t) or no lease write (%t) of %s", stoppedCollector, stoppedLeaseSeen, stoppedUser)
	}
	t.Logf("%s acquired the lease %v after the SIGSTOP; %s's last collector write reached the API server %v after the SIGCONT (%d collector writes in all); "+
		"after the SIGCONT %v of its writes failed without a response, %d of them refused by the lease gate (its log); %d of its lease writes after the hand-over were refused with 409; its log says:\n%s",
		other.name, acquired.Sub(stopAt).Round(time.Millisecond), stopped.name, lastWrite.Sub(contAt).Round(time.Millisecond),
		collectorWrites, failed, refused, leaseConflicts, story)
	if len(late) > 0 {
		t.Errorf("%s made %d writes after %s acquired the lease; the first ones:\n%s", stopped.name, len(late), other.name, strings.Join(late[:min(len(late), 10)], "\n"))
	}
	if len(wrongAgents) > 0 {
		t.Errorf("%s's collector wrote with user agents %v, want %q (its identity)", stopped.name, wrongAgents, wantAgent)
	}
}

// stoppedLog reads p's log: how many writes the lease gate refused, and
// the lines that tell how it stopped leading.
func stoppedLog(t *testing.T, p *proc) (refused int, story string) {
	t.Helper()
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.Contains(l, ownergc.ErrLeaseLost.Error()):
			refused++
		case strings.Contains(l, "lease") && !strings.Contains(l, "Owner GC action"), strings.Contains(l, "Owner GC stopped"):
			lines = append(lines, l)
		}
	}
	return refused, strings.Join(lines, "\n")
}

// kubeconfigAs writes a copy of the cluster's admin kubeconfig that
// impersonates user (in system:masters) and returns its path.
func kubeconfigAs(t *testing.T, c *cluster.Cluster, user string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(c.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = user, []string{"system:masters"}
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// auditEvent is what the test reads of an audit.k8s.io/v1 Event.
type auditEvent struct {
	Stage            string `json:"stage"`
	Verb             string `json:"verb"`
	UserAgent        string `json:"userAgent"`
	ImpersonatedUser struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// readAudit reads the completed requests of the audit log, in the order
// the API server received them.
func readAudit(t *testing.T, path string) []auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if e.Stage == "ResponseComplete" || e.Stage == "Panic" {
			events = append(events, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(events, func(x, y auditEvent) int { return x.RequestReceivedTimestamp.Compare(y.RequestReceivedTimestamp) })
	return events
}
