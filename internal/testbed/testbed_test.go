package testbed_test

import (
	"testing"

	"github.com/nodegc/nodegc/internal/testbed"
)

// The harnesses take a testbed.TB; every test hands them its *testing.T.
var (
	_ testbed.TB = (*testing.T)(nil)
	_ testbed.TB = (*testing.B)(nil)
	_ testbed.TB = (testing.TB)(nil)
)
