package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// startEtcd starts etcd on fresh ports, retrying with new ones when a port
// was taken between picking and binding, and waits until /health is true.
func (c *Cluster) startEtcd(ctx context.Context, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		ports, err := pickPorts(2)
		if err != nil {
			return err
		}
		dataDir := c.path("etcd")
		if err := os.RemoveAll(dataDir); err != nil { // a failed attempt may have started one
			return fmt.Errorf("reset etcd data dir: %w", err)
		}
		clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		args := []string{
			"--name=nodegc",
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=nodegc=" + peerURL,
			"--initial-cluster-state=new",
			// The data is thrown away at teardown: skipping fsync makes every
			// write (and so every API call) cheaper on a busy test machine.
			"--unsafe-no-fsync",
			// A single member elects itself only after an election timeout
			// (default 1 s, about 0.5 s to ready); with no peers to lose, a short
			// one is safe and makes etcd ready in about 0.1 s.
			"--heartbeat-interval=10",
			"--election-timeout=100",
		}
		args = append(args, c.opts.EtcdFlags...)
		p, err := proc.Start("etcd", c.etcdBin, args, nil, c.path("etcd.log"))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.etcd = p
		c.mu.Unlock()
		err = p.WaitReady(ctx, func(ctx context.Context) error { return etcdHealthy(ctx, clientURL) })
		if err == nil {
			c.EtcdClientPort, c.EtcdPeerPort = ports[0], ports[1]
			return nil
		}
		if _, stopErr := p.Stop(c.opts.StopTimeout); stopErr != nil {
			return errors.Join(err, stopErr)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == maxStartAttempts {
			return fmt.Errorf("%w\n%s", err, p.Tail(20))
		}
		logf("etcd attempt %d: a port was taken (%d or %d), retrying with fresh ports", attempt, ports[0], ports[1])
	}
}

func etcdHealthy(ctx context.Context, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s: %s", resp.Status, body)
	}
	return nil
}
