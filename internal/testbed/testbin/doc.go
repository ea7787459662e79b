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
//	testbin log BYTES             write BYTES bytes to standard output (lines of at most 4 KiB), then sleep as above
//
// write and log may be followed by another command, which runs next instead
// of sleep: `testbin write /data 8388608 log 1048576 exit 0` fills its
// writable layer and its log, then exits.
//
// It installs its own signal handlers, so it also stops on SIGTERM when it
// runs as PID 1 of a PID namespace (the pause-like sandbox image uses it
// that way). The registry package builds it once per test process.
package main
