package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodegc/nodegc/internal/testbed"
	"github.com/nodegc/nodegc/internal/testbed/proc"
)

// startScheduler starts kube-scheduler (no leader election) against the
// admin kubeconfig and waits for its /healthz.
func (c *Cluster) startScheduler(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	certDir := filepath.Join(c.Dir, "scheduler-certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		ports, err := testbed.FreePorts(1)
		if err != nil {
			return err
		}
		args := []string{
			"--kubeconfig=" + c.API.KubeconfigPath(),
			"--authentication-kubeconfig=" + c.API.KubeconfigPath(),
			"--authorization-kubeconfig=" + c.API.KubeconfigPath(),
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", ports[0]),
			"--cert-dir=" + certDir,
			"--v=2",
		}
		p, err := proc.Start("kube-scheduler", c.bins["kube-scheduler"], args, nil,
			filepath.Join(c.Dir, fmt.Sprintf("kube-scheduler.%d.log", attempt)))
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.scheduler = p
		c.mu.Unlock()
		err = p.WaitReady(ctx, func(ctx context.Context) error {
			return proc.HealthzOK(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0]))
		})
		if err == nil {
			return nil
		}
		if _, stopErr := p.Stop(10 * time.Second); stopErr != nil {
			return fmt.Errorf("%w; stop: %v", err, stopErr)
		}
		if !errors.Is(err, proc.ErrAddrInUse) || attempt == 3 {
			return fmt.Errorf("kube-scheduler not healthy: %w\n%s", err, p.Tail(40))
		}
	}
}
