package images

import (
	"context"
	"testing"
)

// The state file's save bounds, for external tests: a change is saved
// within SaveInterval, unless it only moves a last-used time by less than
// LastUsedSaveStep.
const (
	SaveInterval     = saveInterval
	LastUsedSaveStep = lastUsedSaveStep
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
