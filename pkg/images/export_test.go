package images

import (
	"context"
	"testing"
)

// RunUntilCleanup runs m in the background until the test ends: its
// cleanup cancels Run and waits for it, and reports an error Run returned.
// For this package's tests, external ones too.
func RunUntilCleanup(t testing.TB, m *Manager) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("image GC manager: %v", err)
		}
	})
}
