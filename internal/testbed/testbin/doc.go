// Command testbin is the entrypoint of every container the test bed runs.
// It is tiny, static (CGO_ENABLED=0) and has no dependencies beyond the
// standard library, so that a one-layer image holding it runs under any
// runtime without a base image.
//
// Usage:
//
//	testbin sleep                 sleep until SIGTERM or SIGINT (exit 0); SIGKILL kills it
//	testbin exit CODE [AFTER]     exit with CODE, after an optional duration (e.g. 2s)
//	testbin write PATH BYTES      write BYTES bytes of data to PATH, then sleep as above
//
// It installs its own signal handlers, so it also stops on SIGTERM when it
// runs as PID 1 of a PID namespace (the pause-like sandbox image uses it
// that way). The registry package builds it once per test process.
package main
