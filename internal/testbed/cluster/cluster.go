package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// Options tunes a Cluster. The zero value is what most tests want.
type Options struct {
	// APIServerFlags are appended to kube-apiserver's command line after the
	// harness's own flags (for scalar flags the last one wins).
	APIServerFlags []string
	// ServiceAccountAdmission keeps kube-apiserver's ServiceAccount
	// admission plugin on (it is disabled by default: no controller makes
	// the "default" ServiceAccounts it needs). Set it when a
	// kube-controller-manager with the serviceaccount-controller runs and
	// pods need API credentials (a real node).
	ServiceAccountAdmission bool
	// EtcdFlags are appended to etcd's command line.
	EtcdFlags []string
	// StartTimeout bounds the wait for each component to become ready
	// (default 60s; a warm start takes a few seconds, the margin is for a
	// loaded CI machine running several test packages at once).
	StartTimeout time.Duration
	// StopTimeout is how long a component gets to exit after SIGTERM before
	// it gets SIGKILL (default 10s).
	StopTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
	return o
}

// Cluster is a running etcd + kube-apiserver (+ optional
// kube-controller-manager) owned by one test. The exported fields are set by
// Start and never change.
type Cluster struct {
	// URL is kube-apiserver's base URL, https://127.0.0.1:<APIServerPort>.
	URL string
	// Token is the admin's bearer token (user "admin", uid "admin-uid",
	// group system:masters).
	Token string
	// APIServerPort is kube-apiserver's secure port on 127.0.0.1.
	APIServerPort int
	// EtcdClientPort and EtcdPeerPort are etcd's ports on 127.0.0.1.
	EtcdClientPort, EtcdPeerPort int
	// Dir is the cluster's temp dir (certificates, etcd data, logs); it is
	// removed at teardown.
	Dir string

	opts       Options
	etcdBin    string
	apiBin     string
	pki        *pki
	kubeconfig string
	client     kubernetes.Interface

	mu        sync.Mutex // guards the fields below
	etcd      *proc.Process
	apiserver *proc.Process
	apiStarts int
	kcms      []*ControllerManager
	reserved  *reservation // holds APIServerPort while kube-apiserver is stopped
	tornDown  bool
}

// Start starts etcd and kube-apiserver, waits until /readyz is ok, and
// registers their teardown with t.Cleanup. It stops the test (see
// testbed.Require) if a binary is missing, and fails it if the start does.
func Start(t testbed.TB, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{
		opts:    opts.withDefaults(),
		etcdBin: testbed.Binary(t, "etcd"),
		apiBin:  testbed.Binary(t, "kube-apiserver"),
	}
	sweepStaleDirs(t.Logf)
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		t.Fatalf("create cluster dir: %v", err)
	}
	c.Dir = dir
	t.Cleanup(func() { c.teardown(t) })

	begin := time.Now()
	if err := c.prepare(); err != nil {
		t.Fatalf("prepare cluster in %s: %v", dir, err)
	}
	ctx := t.Context()
	if err := c.startEtcd(ctx, t.Logf); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	etcdReady := time.Since(begin)
	if err := c.startAPIServer(ctx, t.Logf, true); err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	if err := c.writeKubeconfig(); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	if c.client, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatalf("create client: %v", err)
	}
	if err := c.waitForDefaultNamespace(ctx); err != nil {
		t.Fatalf("wait for namespace default: %v", err)
	}
	t.Logf("cluster up in %s (etcd ready after %s): kube-apiserver %s, etcd 127.0.0.1:%d, dir %s",
		time.Since(begin).Round(time.Millisecond), etcdReady.Round(time.Millisecond), c.URL, c.EtcdClientPort, c.Dir)
	return c
}

// prepare generates the token and key material and writes the files the
// processes read.
func (c *Cluster) prepare() error {
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("generate token: %w", err)
	}
	c.Token = hex.EncodeToString(tok)
	p, err := newPKI()
	if err != nil {
		return err
	}
	c.pki = p
	files := map[string][]byte{
		"ca.crt":      p.caCert,
		"serving.crt": p.servingCert,
		"serving.key": p.servingKey,
		"sa.pub":      p.saPublic,
		"sa.key":      p.saPrivate,
		"tokens.csv":  fmt.Appendf(nil, "%s,admin,admin-uid,system:masters\n", c.Token),
	}
	for name, data := range files {
		if err := os.WriteFile(c.path(name), data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

func (c *Cluster) path(name string) string { return filepath.Join(c.Dir, name) }

// RESTConfig returns a fresh admin config trusting the cluster's CA.
// Client-side rate limiting is off (QPS -1): set QPS and Burst on the copy
// to measure a component under its own limits.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: bytes.Clone(c.pki.caCert)},
		QPS:             -1,
	}
}

// RESTConfigAs returns RESTConfig impersonating user with groups, so RBAC
// decides what it may do (the admin may impersonate anyone). For a service
// account pass "system:serviceaccount:<ns>:<name>" and the groups
// "system:serviceaccounts", "system:serviceaccounts:<ns>".
// "system:authenticated" is added by the API server.
func (c *Cluster) RESTConfigAs(user string, groups ...string) *rest.Config {
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// Client returns a clientset for the admin built from RESTConfig.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// KubeconfigPath returns the path of a kubeconfig file for the admin (CA
// and token embedded), for binaries and kubectl.
func (c *Cluster) KubeconfigPath() string { return c.kubeconfig }

// CACert returns the PEM-encoded CA that signed kube-apiserver's serving
// certificate.
func (c *Cluster) CACert() []byte { return bytes.Clone(c.pki.caCert) }

// PIDs returns the process IDs of the running components, keyed by name
// ("etcd", "kube-apiserver", "kube-controller-manager-0", ...).
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := map[string]int{}
	for _, p := range c.runningLocked() {
		pids[p.Name] = p.PID()
	}
	return pids
}

// runningLocked lists the processes not yet known to have exited, in
// teardown order (controller managers, kube-apiserver, etcd).
func (c *Cluster) runningLocked() []*proc.Process {
	var ps []*proc.Process
	for i := len(c.kcms) - 1; i >= 0; i-- {
		ps = append(ps, c.kcms[i].proc)
	}
	ps = append(ps, c.apiserver, c.etcd)
	var running []*proc.Process
	for _, p := range ps {
		if p != nil && !p.Exited() {
			running = append(running, p)
		}
	}
	return running
}

// teardown stops every process and removes Dir. It runs once, from
// t.Cleanup.
func (c *Cluster) teardown(t testbed.TB) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tornDown {
		return
	}
	c.tornDown = true
	begin := time.Now()
	all := c.allLocked()
	if t.Failed() {
		for _, p := range all {
			t.Logf("--- last lines of %s log (%s) ---\n%s", p.Name, p.LogPath, p.Tail(40))
		}
	}
	var took []string
	for _, p := range c.runningLocked() {
		stopBegin := time.Now()
		killed, err := p.Stop(c.opts.StopTimeout)
		took = append(took, fmt.Sprintf("%s %s", p.Name, time.Since(stopBegin).Round(time.Millisecond)))
		if err != nil {
			t.Errorf("stop %s: %v", p.Name, err)
		}
		if killed {
			t.Logf("%s did not exit within %s of SIGTERM: sent SIGKILL", p.Name, c.opts.StopTimeout)
		}
	}
	c.reserved.release()
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Errorf("remove cluster dir: %v", err)
	}
	t.Logf("cluster torn down in %s (%s)", time.Since(begin).Round(time.Millisecond), strings.Join(took, ", "))
}

// allLocked lists every process ever started, for log tails.
func (c *Cluster) allLocked() []*proc.Process {
	var ps []*proc.Process
	for _, p := range []*proc.Process{c.etcd, c.apiserver} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	for _, m := range c.kcms {
		ps = append(ps, m.proc)
	}
	return ps
}
