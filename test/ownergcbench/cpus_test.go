package ownergcbench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// serverCPUs reads $NODEGC_BENCH_SERVER_CPUS: a comma-separated list of
// CPU numbers ("0") for kube-apiserver and etcd, every other CPU of the
// bench's own set going to the bench and what it starts (the collectors,
// the loops' clients, the watch that times deletions). Unset: no pinning,
// all processes share every CPU (ok false).
func serverCPUs() (server, clients unix.CPUSet, ok bool, err error) {
	if err := unix.SchedGetaffinity(0, &clients); err != nil {
		return server, clients, false, fmt.Errorf("read the bench's CPUs: %w", err)
	}
	return splitCPUs(os.Getenv("NODEGC_BENCH_SERVER_CPUS"), clients)
}

// splitCPUs splits all into the CPUs listed in v (the server's) and the
// rest (the clients'); v "" leaves all to everyone (ok false).
func splitCPUs(v string, all unix.CPUSet) (server, clients unix.CPUSet, ok bool, err error) {
	clients = all
	if v == "" {
		return server, clients, false, nil
	}
	for _, f := range strings.Split(v, ",") {
		cpu, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || cpu < 0 || !all.IsSet(cpu) {
			return server, clients, false, fmt.Errorf("NODEGC_BENCH_SERVER_CPUS=%q: %q is not one of the bench's CPUs (%s)", v, f, cpuList(all))
		}
		server.Set(cpu)
		clients.Clear(cpu)
	}
	if clients.Count() == 0 {
		return server, clients, false, fmt.Errorf("NODEGC_BENCH_SERVER_CPUS=%q leaves no CPU for the deleters (the bench has %s)", v, cpuList(all))
	}
	return server, clients, true, nil
}

// pinProcess sets the CPU affinity of every thread of pid (a process's
// threads each have their own; a thread inherits its creator's). It goes
// over the threads until a pass finds no new one, so that a thread created
// meanwhile by a thread not yet pinned is pinned too.
func pinProcess(pid int, set unix.CPUSet) error {
	var done []int
	for {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		found := false
		for _, en := range entries {
			tid, err := strconv.Atoi(en.Name())
			if err != nil || slices.Contains(done, tid) {
				continue
			}
			found = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("pin thread %d of %d: %w", tid, pid, err)
			}
			done = append(done, tid)
		}
		if !found {
			return nil
		}
	}
}

// pin moves kube-apiserver and etcd to the server's CPUs and the bench to
// the others (see serverCPUs). Processes the bench starts from then on
// inherit its CPUs. It returns how the processes share the CPUs, for the
// table.
func (e *benchEnv) pin() string {
	server, clients, ok, err := serverCPUs()
	if err != nil {
		e.b.Fatal(err)
	}
	if !ok {
		return fmt.Sprintf("on %d CPUs shared by all", clients.Count())
	}
	for name, pid := range e.c.PIDs() {
		if err := pinProcess(pid, server); err != nil {
			e.b.Fatalf("pin %s: %v", name, err)
		}
	}
	if err := pinProcess(os.Getpid(), clients); err != nil {
		e.b.Fatalf("pin the bench: %v", err)
	}
	how := fmt.Sprintf("kube-apiserver and etcd on CPU %s, the deleters and the bench on CPU %s", cpuList(server), cpuList(clients))
	fmt.Printf("[bench] %s\n", how)
	return how
}

// cpuList writes the CPUs of s as a comma-separated list ("0,1").
func cpuList(s unix.CPUSet) string {
	var cpus []string
	for _, cpu := range cpuNumbers(s) {
		cpus = append(cpus, strconv.Itoa(cpu))
	}
	return strings.Join(cpus, ",")
}

// cpuNumbers lists the CPUs of s in ascending order.
func cpuNumbers(s unix.CPUSet) []int {
	var cpus []int
	for i := range len(s) * 64 {
		if s.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}
