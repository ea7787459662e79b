package images_test

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// minParallel is the -parallel this package's tests run with unless
// -parallel is given: at least 4, GOMAXPROCS on a bigger machine.
//
// The integration tests run in parallel (see newBed) and wait on their
// containerd nodes most of the time, not on the CPU: the 32 of them took
// 280 s of wall and 141 s of CPU (test binary, containerd and shims) at go
// test's default, -parallel GOMAXPROCS, on a 2-core machine; 167 s and
// 152 s at 4, the three modes of TestNoContainerLosesItsImage (about 80 s
// each, nearly all waiting on the GC runs' listings) at once.
const minParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(max(minParallel, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintf(os.Stderr, "set -test.parallel: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}
