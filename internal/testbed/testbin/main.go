package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

const usage = "usage: testbin sleep | exit CODE [AFTER] | write PATH BYTES [COMMAND...] | log BYTES [COMMAND...]"

func main() {
	if len(os.Args) < 2 {
		fail(usage)
	}
	run(os.Args[1:])
}

// run runs the command args[0]. write and log run the command that follows
// their arguments, or sleep when none does.
func run(args []string) {
	switch cmd, args := args[0], args[1:]; cmd {
	case "sleep":
		sleep()
	case "exit":
		exit(args)
	case "write":
		if len(args) < 2 {
			fail(usage)
		}
		write(args[:2])
		next(args[2:])
	case "log":
		if len(args) < 1 {
			fail(usage)
		}
		logBytes(args[0])
		next(args[1:])
	default:
		fail(fmt.Sprintf("unknown command %q; %s", cmd, usage))
	}
}

func next(args []string) {
	if len(args) == 0 {
		sleep()
	}
	run(args)
}

// sleep blocks until SIGTERM or SIGINT and exits 0.
func sleep() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	sig := <-ch
	fmt.Printf("testbin: %v, exiting\n", sig)
	os.Exit(0)
}

func exit(args []string) {
	if len(args) < 1 || len(args) > 2 {
		fail(usage)
	}
	code, err := strconv.Atoi(args[0])
	if err != nil || code < 0 || code > 255 {
		fail(fmt.Sprintf("exit code %q: want 0..255", args[0]))
	}
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		if err != nil {
			fail(fmt.Sprintf("duration %q: %v", args[1], err))
		}
		time.Sleep(d)
	}
	fmt.Printf("testbin: exiting with %d\n", code)
	os.Exit(code)
}

// write fills PATH with BYTES bytes (a repeating pattern: the point is the
// space it takes in the container's writable layer, not its content).
func write(args []string) {
	if len(args) != 2 {
		fail(usage)
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || n < 0 {
		fail(fmt.Sprintf("byte count %q: want a non-negative integer", args[1]))
	}
	f, err := os.Create(args[0])
	if err != nil {
		fail(err.Error())
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	for n > 0 {
		chunk := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:chunk]); err != nil {
			fail(fmt.Sprintf("write %s: %v", args[0], err))
		}
		n -= chunk
	}
	if err := f.Close(); err != nil {
		fail(fmt.Sprintf("close %s: %v", args[0], err))
	}
	fmt.Printf("testbin: wrote %s bytes to %s\n", args[1], args[0])
}

// logBytes writes count bytes to standard output, in lines of at most 4 KiB
// (newline included), so that the runtime's log file holds them with little
// overhead (its timestamp and stream prefix per line).
func logBytes(count string) {
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 0 {
		fail(fmt.Sprintf("byte count %q: want a non-negative integer", count))
	}
	const lineLen = 4096
	line := make([]byte, lineLen)
	for i := range line {
		line[i] = 'a' + byte(i%26)
	}
	for n > 0 {
		l := min(n, lineLen)
		out := line[:l]
		out[l-1] = '\n'
		if _, err := os.Stdout.Write(out); err != nil {
			fail(fmt.Sprintf("write to stdout: %v", err))
		}
		out[l-1] = 'a' + byte((l-1)%26)
		n -= l
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "testbin:", msg)
	os.Exit(2)
}
