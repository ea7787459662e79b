package ownergcbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"
)

// profiler writes CPU profiles of the timed deletions when
// $NODEGC_BENCH_PROFILE names a directory: kube-apiserver's (its
// /debug/pprof/profile, on by default) and the deleter's: nodegc's (its
// enableProfilingHandler is then turned on; with what it allocated
// meanwhile, its /debug/pprof/allocs over the same seconds), or the bench
// process's own for the plain DELETE loop (it runs in the bench, beside
// the bench's watch). kube-controller-manager is not profiled. A remote
// profile lasts $NODEGC_BENCH_PROFILE_SECONDS (default 4; a cascade of
// 5,000 takes 2-5 s), from just before the deletion starts; the bench's
// own lasts the deletion. Each start-up round at the large size is profiled the same
// way, from just after the collector's process started (nodegc's own
// profile once its HTTP server answers, a few milliseconds later). The
// profiles are named after what they cover, in the order they ran:
// 001-nodegc-5000-kube-apiserver.pprof, 001-nodegc-5000-nodegc.pprof,
// 002-..., 031-nodegc-startup-100000-nodegc.pprof; read them with `go tool
// pprof`.
type profiler struct {
	dir     string
	seconds int
	mu      sync.Mutex
	seq     int
}

// newProfiler returns nil when $NODEGC_BENCH_PROFILE is unset.
func newProfiler() (*profiler, error) {
	dir := os.Getenv("NODEGC_BENCH_PROFILE")
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("NODEGC_BENCH_PROFILE=%s: %w", dir, err)
	}
	p := &profiler{dir: dir, seconds: 4}
	if v := os.Getenv("NODEGC_BENCH_PROFILE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("NODEGC_BENCH_PROFILE_SECONDS=%q: want a positive number of seconds", v)
		}
		p.seconds = n
	}
	return p, nil
}

// deleter is who deletes in a timed deletion, or the collector starting
// up: the process profiled beside kube-apiserver.
type deleter struct {
	name string // in the profiles' file names
	pid  int    // whose CPU time is counted
	// profileURL is where the process serves Go's profiles (its
	// /debug/pprof/profile); "" when it does not. self: the deleter is the
	// bench process (the loop).
	profileURL string
	self       bool
}

// start starts the profiles of one deletion or start-up (what names it);
// stop waits for them and writes them. A profile that fails is reported and
// the bench goes on.
func (p *profiler) start(e *benchEnv, d deleter, what string) (stop func()) {
	if p == nil {
		return func() {}
	}
	p.mu.Lock()
	p.seq++
	prefix := filepath.Join(p.dir, fmt.Sprintf("%03d-%s-", p.seq, what))
	p.mu.Unlock()
	ctx := e.b.Context()
	var wg sync.WaitGroup
	fetch := func(name string, get func(context.Context) ([]byte, error)) {
		wg.Go(func() {
			data, err := get(ctx)
			if err == nil {
				err = os.WriteFile(prefix+name+".pprof", data, 0o644)
			}
			if err != nil {
				fmt.Printf("[bench] profile %s: %v\n", name, err)
			}
		})
	}
	secs := strconv.Itoa(p.seconds)
	fetch("kube-apiserver", func(ctx context.Context) ([]byte, error) {
		return e.fast.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).DoRaw(ctx)
	})
	if d.profileURL != "" {
		get := func(path string) func(context.Context) ([]byte, error) {
			return func(ctx context.Context) ([]byte, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.profileURL+path+"?seconds="+secs, nil)
				if err != nil {
					return nil, err
				}
				// A process just started may not listen yet.
				resp, err := http.DefaultClient.Do(req)
				for deadline := time.Now().Add(2 * time.Second); err != nil && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
					resp, err = http.DefaultClient.Do(req)
				}
				if err != nil {
					return nil, err
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return nil, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
				}
				return io.ReadAll(resp.Body)
			}
		}
		fetch(d.name, get("/debug/pprof/profile"))
		// What it allocated meanwhile (a delta profile).
		fetch(d.name+"-allocs", get("/debug/pprof/allocs"))
		return wg.Wait
	}
	if !d.self {
		return wg.Wait
	}
	f, err := os.Create(prefix + "bench.pprof")
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Printf("[bench] CPU profile of the bench: %v\n", err)
		return wg.Wait
	}
	began := time.Now()
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Printf("[bench] CPU profile of the bench: %v\n", err)
		}
		fmt.Printf("[bench] CPU profile of the bench over %s: %s\n", time.Since(began).Round(time.Millisecond), f.Name())
		wg.Wait()
	}
}
