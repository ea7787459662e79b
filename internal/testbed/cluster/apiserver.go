package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// apiserverArgs returns kube-apiserver's command line for port.
func (c *Cluster) apiserverArgs(port int) []string {
	args := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.EtcdClientPort),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		// Advertise loopback rather than the machine's default-route address:
		// nothing outside this machine should ever be named, and a machine
		// without a default route would otherwise fail the start.
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + c.path("serving.crt"),
		"--tls-private-key-file=" + c.path("serving.key"),
		// Keep anything the apiserver writes in our dir (default /var/run/kubernetes).
		"--cert-dir=" + c.path("apiserver-certs"),
		"--token-auth-file=" + c.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.path("sa.pub"),
		"--service-account-signing-key-file=" + c.path("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		// No Endpoints for the kubernetes Service: else an error every 10 s.
		"--endpoint-reconciler-type=none",
	}
	if !c.opts.ServiceAccountAdmission {
		// No controller creates the "default" ServiceAccount, so this
		// admission plugin would reject every Pod.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	return append(args, c.opts.APIServerFlags...)
}

// startAPIServer starts kube-apiserver and waits for /readyz. With
// pickPort it picks a fresh port (retrying on proc.ErrAddrInUse) and sets URL and
// APIServerPort; otherwise it reuses APIServerPort (a restart).
func (c *Cluster) startAPIServer(ctx context.Context, logf func(string, ...any), pickPort bool) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		port := c.APIServerPort
		if pickPort {
			ports, err := pickPorts(1)
			if err != nil {
				return err
			}
			port = ports[0]
		}
		c.mu.Lock()
		name := "kube-apiserver"
		logPath := c.path(fmt.Sprintf("kube-apiserver.%d.log", c.apiStarts))
		c.apiStarts++
		c.mu.Unlock()
		p, err := proc.Start(name, c.apiBin, c.apiserverArgs(port), nil, logPath)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.apiserver = p
		c.mu.Unlock()
		url := fmt.Sprintf("https://127.0.0.1:%d", port)
		hc, err := c.adminHTTPClient(url)
		if err != nil {
			return err
		}
		err = p.WaitReady(ctx, func(ctx context.Context) error { return apiserverReady(ctx, hc, url) })
		hc.CloseIdleConnections()
		if err == nil {
			if pickPort { // a restart leaves them alone: tests may read them concurrently
				c.URL, c.APIServerPort = url, port
			}
			return nil
		}
		if _, stopErr := p.Stop(c.opts.StopTimeout); stopErr != nil {
			return errors.Join(err, stopErr)
		}
		if !pickPort && errors.Is(err, proc.ErrAddrInUse) {
			return fmt.Errorf("port %d was taken by another process while kube-apiserver was stopped: %w", port, err)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == maxStartAttempts {
			return fmt.Errorf("%w\n%s", err, p.Tail(30))
		}
		logf("kube-apiserver attempt %d: port %d was taken, retrying with a fresh port", attempt, port)
	}
}

// adminHTTPClient returns an HTTP client for url that trusts the cluster CA
// and sends the admin token.
func (c *Cluster) adminHTTPClient(url string) (*http.Client, error) {
	cfg := c.RESTConfig()
	cfg.Host = url
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("admin HTTP client for %s: %w", url, err)
	}
	return hc, nil
}

func apiserverReady(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil
}

// waitForDefaultNamespace waits until the API server's system namespaces
// controller has created "default" (it runs after /readyz turns ok; in
// practice it is there at once), so tests may use it straight away.
func (c *Cluster) waitForDefaultNamespace(ctx context.Context) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, c.opts.StartTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after
// Options.StopTimeout) and waits for it to exit; etcd keeps running. Clients
// get connection errors until StartAPIServer.
func (c *Cluster) StopAPIServer(t testbed.TB) {
	t.Helper()
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p == nil || p.Exited() {
		t.Fatalf("StopAPIServer: kube-apiserver is not running")
	}
	begin := time.Now()
	killed, err := p.Stop(c.opts.StopTimeout)
	if err != nil {
		t.Fatalf("stop kube-apiserver: %v", err)
	}
	// Hold the port while stopped (connections are still refused), so that
	// no other test picks it as a free one meanwhile; StartAPIServer
	// releases it just before the restart.
	r, err := reservePort(c.APIServerPort)
	if err != nil {
		t.Logf("kube-apiserver's port stays unreserved while stopped: %v", err)
	}
	c.mu.Lock()
	c.reserved = r
	c.mu.Unlock()
	t.Logf("kube-apiserver stopped in %s (SIGKILL needed: %t)", time.Since(begin).Round(time.Millisecond), killed)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same etcd, certificates and token, and waits for
// /readyz. It fails the test if the port was taken meanwhile.
func (c *Cluster) StartAPIServer(t testbed.TB) {
	t.Helper()
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p != nil && !p.Exited() {
		t.Fatalf("StartAPIServer: kube-apiserver is already running (pid %d)", p.PID())
	}
	begin := time.Now()
	c.releasePort()
	if err := c.startAPIServer(t.Context(), t.Logf, false); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver ready again in %s", time.Since(begin).Round(time.Millisecond))
}

// releasePort closes the listener StopAPIServer holds on the port, if any.
func (c *Cluster) releasePort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reserved.release()
	c.reserved = nil
}
