package ownergcbench

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nodegc/nodegc/internal/testbed/cluster"
	"github.com/nodegc/nodegc/internal/testbed/nodegcproc"
)

// BenchmarkOwnerGC prints one table, from one run on one real
// kube-apiserver + etcd, of nodegc's owner GC (the `nodegc run
// --owner-gc=only` process built from this tree), kube-controller-manager
// with only its garbage collector (--controllers=garbagecollector) and a
// plain loop of DELETE requests, with the ratios issue 18 sets as goals:
//
//   - Rate, unthrottled: a Background cascade of each size of
//     $NODEGC_BENCH_CASCADES (default 5000,50000) ConfigMaps owned by one
//     ConfigMap, timed from the owner's DELETE until a watch has seen every
//     dependent deleted; nodegc without a client-side rate limit
//     (kubeAPIQPS -1, like the loop's client),
//     kube-controller-manager at --kube-api-qps=500 --kube-api-burst=1000;
//     the plain loop deletes as many such ConfigMaps by name from 20
//     goroutines on an unthrottled client, timed from its start the same
//     way; the loop that watches does the same while it watches the
//     metadata of every ConfigMap, as a collector must to learn of
//     deletions (client-go's metadata client, as kube-controller-manager's
//     collector), which bounds what any such collector can reach. Each
//     row's rate is the median of several rounds, in each of which the
//     deleters run in turn, each round starting with the next one (a
//     deleter that always ran first, or always after the same other,
//     would carry what that position does to the cluster):
//     $NODEGC_BENCH_ROUNDS (default 5) rounds of a cascade of at most
//     10,000 dependents, which takes seconds, and
//     $NODEGC_BENCH_ROUNDS_LARGE (default 3) of a larger one, which takes
//     a minute; kube-controller-manager, whose rate its client-side limit
//     holds (555/s in each of 10 rounds of 5,000), deletes a larger
//     cascade in the first round only (100 s at 50,000).
//     Each deletion starts once kube-apiserver and etcd are quiet (see
//     quiesce). Requests per object are kube-apiserver's own
//     apiserver_request_total on configmaps (minus
//     LIST, WATCH and the bench's DELETE of the owner); the details also
//     give how many DELETEs kube-apiserver was handling at a time, on
//     average (the time it spent in them, apiserver_request_duration_seconds,
//     over the deletion's), the concurrency a deleter keeps up. Goals:
//     nodegc/loop >= 0.95, nodegc/kcm >= 2. The CPU per object row is
//     what a deletion cost the machine: the CPU time of the deleter,
//     kube-apiserver, etcd and the bench (whose watch times every
//     deletion) over the objects, pooled over the rounds. On 2 cores
//     shared by all, the rate follows it; a round's rate also follows
//     kube-apiserver's own background work (dips of a few hundred
//     milliseconds at half the rate, while its CPU time rises, whoever
//     deletes), so a ratio of two deleters' rates is the geometric mean of
//     the rounds' ratios (each deleter's rate over the other's in the same
//     round), with its 95% confidence interval (see testbed.RatioInterval),
//     and the details print every round's. A goal is met when the whole
//     interval meets it, missed when the whole interval misses it, and
//     otherwise "not shown" either way; a deleter measured once
//     (kube-controller-manager at a large size) is compared by the ratio of
//     the rates, nodegc's being its median.
//     $NODEGC_BENCH_TRACE prints each deletion per 100 ms (objects
//     deleted, each process's CPU time). $NODEGC_BENCH_COMPARE=PATH adds
//     a fifth deleter to every round: the nodegc binary at PATH (another
//     build: main's, or an experiment's), run as this tree's is; the
//     details then give this tree's rate over that build's, round by
//     round, with its interval, and the same for the two processes' own
//     CPU time per object. One round's rate varies by 10-20%; over 10
//     rounds the interval is about 9% either side, so a change of a few
//     percent needs many more.
//     $NODEGC_BENCH_SERVER_CPUS=0 runs kube-apiserver and etcd on CPU 0
//     and everything else (the deleters, the bench and its watch) on the
//     other CPUs (see serverCPUs), as in a cluster, where the collector
//     runs on a node of its own: the rates then say how fast each deleter
//     drives the server, without its own CPU time taken from the server's.
//   - Rate at equal QPS: a cascade of $NODEGC_BENCH_OBJECTS (default 5000)
//     with nodegc at 40 QPS / burst 60 and kube-controller-manager at
//     --kube-api-qps=20 --kube-api-burst=30 (its collector doubles both).
//     Goals: nodegc/kcm >= 2, nodegc <= 1.1 requests per object.
//   - Memory and start-up: a population of two sizes,
//     $NODEGC_BENCH_SCALE (default 10000,100000) objects (ConfigMaps,
//     Secrets, ServiceAccounts in 50 namespaces, one owner per 10 objects;
//     see population_test.go). At each size each collector runs alone, as a
//     process of its own (the other one stopped): start-up is from just
//     before the process is started until it says it has synced, polled
//     every 100 ms (nodegc: nodegc_owner_gc_synced 1 on its /metrics;
//     kube-controller-manager: its log line "Garbage collector: all
//     resource monitors have synced"). Then it idles for $NODEGC_BENCH_IDLE
//     (default 15s) and its resident memory is the median of 5 readings of
//     VmRSS in /proc/PID/status 1 s apart; VmHWM (the peak) is read after
//     the last. The memory per object is the slope between the two sizes,
//     (RSS(large) - RSS(small)) / (large - small). The start-up at the
//     large size is the median of $NODEGC_BENCH_STARTUPS (default 5)
//     rounds: the memory runs, then start-ups alone (start, synced, stop),
//     each round alternating which collector goes first. Before each
//     collector starts, the bench has kube-apiserver collect its garbage
//     and waits until it and etcd are quiet (see quiesce): the CPU time
//     kube-apiserver spent to serve the same 100,000 objects to the same
//     client varied from about 2 to 7 seconds without that. Goals:
//     nodegc/kcm <= 0.5 for both the slope and the start-up.
//
// The rates are measured first, while the cluster holds nothing but the
// cascades' objects: a collector lists every object of every resource
// before it collects, so with the population in place each of the six
// collectors started for a cascade would first sync 100,000 objects
// (minutes of the run), and the cascades would be measured on a graph ten
// times bigger than the one they delete from, not comparable with earlier
// runs. The population only grows (small, then large), so it is created
// once.
//
// nodegc runs without leader election, as kube-controller-manager does
// here (--leader-elect=false); its container runtime endpoint does not
// exist, which --owner-gc=only never dials. The table also says when each
// collector's log shows it started collecting (what the process does
// before: flags, configuration, clients), the CPU time nodegc,
// kube-controller-manager, kube-apiserver and etcd used during each
// deletion, and whether anything wrote to the population while the
// collectors synced and idled (nothing should: no controller of a
// garbage-collector-only kube-controller-manager handles these kinds).
// With $NODEGC_BENCH_PROFILE, it writes CPU profiles of the deletions and
// of the start-ups (see profiler).
func BenchmarkOwnerGC(b *testing.B) {
	begin := time.Now()
	sizes := readSizes(b)
	bin, err := nodegcproc.Build()
	if err != nil {
		b.Fatal(err)
	}
	e := newBenchEnv(b, sizes, bin)
	var res results
	res.cpus = e.pin()
	res.kcmVersion, res.idle = kcmVersion(e), sizes.idle

	for _, n := range sizes.cascades {
		rounds := sizes.rounds(n)
		var ng, kc, lp, lw, other []cascadeResult
		type entry struct {
			name string
			out  *[]cascadeResult
			run  func() cascadeResult
			once bool // in the first round only
		}
		deleters := []entry{
			{name: "nodegc", out: &ng, run: func() cascadeResult { return e.cascade(n, nodegc(unlimited, 0)) }},
			// Its client-side limit holds its rate (555/s in each of 10
			// rounds of 5,000), and a large cascade takes it minutes: once.
			{name: "kube-controller-manager", out: &kc, run: func() cascadeResult { return e.cascade(n, kcm(500, 1000)) },
				once: n > smallCascade},
			{name: "plain DELETE loop", out: &lp, run: func() cascadeResult { return e.deleteLoop(n, false) }},
			{name: "DELETE loop that watches", out: &lw, run: func() cascadeResult { return e.deleteLoop(n, true) }},
		}
		if sizes.compare != "" {
			deleters = append(deleters, entry{name: "nodegc built elsewhere", out: &other,
				run: func() cascadeResult { return e.cascade(n, comparedNodegc(sizes.compare)) }})
		}
		once := make([]bool, len(deleters))
		for i, d := range deleters {
			once[i] = d.once
		}
		for i := range rounds {
			for _, j := range roundOrder(i, once) {
				d := deleters[j]
				fmt.Printf("[bench] unthrottled, %d dependents, round %d of %d: %s\n", n, i+1, rounds, d.name)
				*d.out = append(*d.out, d.run())
			}
		}
		row := rateRow{n: n, nodegc: median(ng), kcm: median(kc), loop: median(lp), loopWatch: median(lw)}
		if len(other) > 0 {
			row.compared = median(other)
		}
		res.unthrottled = append(res.unthrottled, row)
	}
	fmt.Printf("[bench] equal QPS, %d dependents: nodegc\n", sizes.equalQPS)
	res.equal = rateRow{n: sizes.equalQPS, nodegc: e.cascade(sizes.equalQPS, nodegc(40, 60))}
	fmt.Printf("[bench] equal QPS, %d dependents: kube-controller-manager\n", sizes.equalQPS)
	res.equal.kcm = e.cascade(sizes.equalQPS, kcm(20, 30))

	from := 0
	for i, n := range sizes.scale {
		e.populate(from, n)
		from = n
		res.scale[i].n = n
		res.scale[i].nodegc = e.synced(nodegc(unlimited, 0))
		res.scale[i].kcm = e.synced(kcm(500, 1000))
	}
	large := res.scale[1]
	res.startups.nodegc = []time.Duration{large.nodegc.synced}
	res.startups.kcm = []time.Duration{large.kcm.synced}
	for round := 2; round <= sizes.startups; round++ {
		type entrant struct {
			col collector
			out *[]time.Duration
		}
		order := []entrant{{kcm(500, 1000), &res.startups.kcm}, {nodegc(unlimited, 0), &res.startups.nodegc}}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, en := range order {
			fmt.Printf("[bench] start-up, %d objects, round %d of %d: %s\n", large.n, round, sizes.startups, en.col.name)
			*en.out = append(*en.out, e.startup(en.col))
		}
	}
	res.took = time.Since(begin)

	table := res.table()
	// Printed directly: a benchmark's log is shown only with -v or when
	// it fails.
	fmt.Print(table.String())
	for _, r := range table.ratios {
		b.ReportMetric(r.value, r.unit)
	}
	b.ReportMetric(0, "ns/op") // one observation of many things: ns/op says nothing
}

// sizes are the bench's knobs.
type sizes struct {
	cascades []int // $NODEGC_BENCH_CASCADES: dependents of each unthrottled cascade
	// roundsSmall is $NODEGC_BENCH_ROUNDS (default 5): how many times each
	// unthrottled cascade of at most smallCascade dependents is measured,
	// the rows showing the median (a few seconds long, one sample is at the
	// mercy of whatever else the two cores do then).
	roundsSmall int
	// roundsLarge is $NODEGC_BENCH_ROUNDS_LARGE (default 3): the same for
	// larger cascades (a minute or more a deletion, kube-controller-manager's
	// in the first round only).
	roundsLarge int
	// startups is $NODEGC_BENCH_STARTUPS (default 5): how many times each
	// collector's start-up at the large size is measured (the row shows
	// the median).
	startups int
	equalQPS int           // $NODEGC_BENCH_OBJECTS: dependents of the equal-QPS cascade
	scale    [2]int        // $NODEGC_BENCH_SCALE: the population's two sizes
	idle     time.Duration // $NODEGC_BENCH_IDLE: how long a synced collector idles before its memory is read
	// compare is $NODEGC_BENCH_COMPARE: the path of another nodegc binary
	// (another build: main's, or an experiment's), which then deletes each
	// unthrottled cascade too, in every round beside this tree's; the
	// table gives their ratio round by round. "": none.
	compare string
}

func readSizes(b *testing.B) sizes {
	s := sizes{cascades: intsEnv(b, "NODEGC_BENCH_CASCADES", "5000,50000", 1),
		equalQPS: intsEnv(b, "NODEGC_BENCH_OBJECTS", "5000", 1)[0]}
	scale := intsEnv(b, "NODEGC_BENCH_SCALE", "10000,100000", groupSize)
	if len(scale) != 2 || scale[0] >= scale[1] {
		b.Fatalf("NODEGC_BENCH_SCALE=%v: want two sizes, the smaller first", scale)
	}
	s.scale = [2]int{scale[0], scale[1]}
	s.roundsSmall = intsEnv(b, "NODEGC_BENCH_ROUNDS", "5", 1)[0]
	s.roundsLarge = intsEnv(b, "NODEGC_BENCH_ROUNDS_LARGE", "3", 1)[0]
	s.startups = intsEnv(b, "NODEGC_BENCH_STARTUPS", "5", 1)[0]
	s.idle = 15 * time.Second
	if s.compare = os.Getenv("NODEGC_BENCH_COMPARE"); s.compare != "" {
		if fi, err := os.Stat(s.compare); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			b.Fatalf("NODEGC_BENCH_COMPARE=%q: want the path of a nodegc binary (go build -o PATH ./cmd/nodegc in the tree to compare with)", s.compare)
		}
	}
	if v := os.Getenv("NODEGC_BENCH_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			b.Fatalf("NODEGC_BENCH_IDLE=%q: want a duration", v)
		}
		s.idle = d
	}
	return s
}

// intsEnv reads $name (default def), a comma-separated list of positive
// multiples of unit.
func intsEnv(b *testing.B, name, def string, unit int) []int {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n%unit != 0 {
			b.Fatalf("%s=%q: want positive integers (multiples of %d), comma-separated", name, v, unit)
		}
		out = append(out, n)
	}
	return out
}

// benchEnv is the cluster the bench runs on and what it needs to run the
// collectors.
type benchEnv struct {
	b         *testing.B
	c         *cluster.Cluster
	fast      kubernetes.Interface // unthrottled, protobuf: the bench's own requests
	nodegcBin string
	sizes     sizes
	dir       string    // for nodegc's configuration, state and logs
	prof      *profiler // nil: no profiles
}

func newBenchEnv(b *testing.B, s sizes, nodegcBin string) *benchEnv {
	c := cluster.Start(b, cluster.Options{})
	rc := c.RESTConfig()
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	fast, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "nodegc")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	prof, err := newProfiler()
	if err != nil {
		b.Fatal(err)
	}
	return &benchEnv{b: b, c: c, fast: fast, nodegcBin: nodegcBin, sizes: s, dir: dir, prof: prof}
}

// smallCascade is the largest cascade measured roundsSmall times; larger
// ones are measured roundsLarge times.
const smallCascade = 10000

// rounds is how many times a cascade of n dependents is measured.
func (s sizes) rounds(n int) int {
	if n <= smallCascade {
		return s.roundsSmall
	}
	return s.roundsLarge
}

// roundOrder is the order in which the deleters run in round i (from 0):
// every deleter in the first round, then those not run once only; each
// round starts with the next of them, so that none always runs first or
// always follows the same other (the cluster a deletion leaves behind,
// its etcd and its caches, is the next one's).
func roundOrder(i int, once []bool) []int {
	var in []int
	for j, o := range once {
		if i == 0 || !o {
			in = append(in, j)
		}
	}
	order := make([]int, 0, len(in))
	for k := range in {
		order = append(order, in[(i+k)%len(in)])
	}
	return order
}

// median returns the result with the median rate (the lower middle one of
// an even count), with every round's rate in rates.
func median(rs []cascadeResult) cascadeResult {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b cascadeResult) int { return cmp.Compare(a.perSecond, b.perSecond) })
	m := sorted[(len(sorted)-1)/2]
	cpu := map[string]time.Duration{}
	objects := 0
	var deleteSeconds float64
	var took time.Duration
	for _, r := range rs {
		m.rates = append(m.rates, r.perSecond)
		m.deleterCPU = append(m.deleterCPU, r.cpuPerObject["collector"])
		for name, d := range r.cpu {
			cpu[name] += d
		}
		objects += r.n
		deleteSeconds += r.deleteSeconds
		took += r.took
	}
	m.cpuPerObject = microsPerObject(cpu, objects)
	m.serverDeleting = atATime(deleteSeconds, took)
	return m
}
