package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nodegc/nodegc/internal/clockstep"
)

// StateFileName is the file in stateDirectory that keeps image usage.
const StateFileName = "images.json"

// stateVersion is the version of the state file format this code writes.
// A file of another version is set aside, never half-read. Fields added
// since version 1 (node, watch, boot, a record's arrival and the steps
// forward since) are optional and keep it: a file without them is read as
// written before nodegc kept them, and an older nodegc reads a newer file
// without them.
const stateVersion = 1

// maxStateSize bounds what is read: 100k images take about 20 MB.
const maxStateSize = 64 << 20

// Usage is what nodegc remembers of one image across restarts.
type Usage struct {
	FirstDetected time.Time `json:"firstDetected"`
	// LastUsed is zero when no container used the image since nodegc knows it.
	LastUsed time.Time `json:"lastUsed,omitzero"`
	// Sandbox: the runtime's pod sandboxes ran this image when last seen
	// running (Options.Sandboxes). It stays the sandbox image while no
	// sandbox runs.
	Sandbox bool `json:"sandbox,omitempty"`
	// Arrived is the time the runtime said the image arrived when the
	// record was last checked against it (Tracker.observeArrivals), as
	// the runtime said it: on the wall clock of the pull, never moved by a
	// step of the clock, as FirstDetected and LastUsed are. Only another
	// time is a new copy of the image. Zero when none was read (or in
	// files written before nodegc kept it).
	Arrived time.Time `json:"arrived,omitzero"`
	// SteppedForward is the sum of the steps of the wall clock forward
	// that moved the record's times since the runtime was last asked when
	// the image arrived (Tracker.observeArrivals: from just before the
	// asking), while nodegc ran or while it was down (stepWhileDown). A
	// copy pulled since has its arrival on the clock of its pull, which
	// those steps did not move: on the records' timeline it arrived at
	// most that much later.
	SteppedForward time.Duration `json:"steppedForward,omitempty"`
}

type stateFile struct {
	Version int `json:"version"`
	// Node is the node the records describe; empty in files written
	// before nodegc kept it.
	Node string `json:"node,omitempty"`
	// WatchedSince is when nodegc began to watch the node's containers
	// without a break (a restart within watchGapCovered is none), as of
	// WatchedUntil, the last time it is known to have watched: the time of
	// the write. Zero in files written before nodegc kept them.
	WatchedSince time.Time `json:"watchedSince,omitzero"`
	WatchedUntil time.Time `json:"watchedUntil,omitzero"`
	// Boot and SinceBoot are the machine's boot ID and how long it had
	// been up (in nanoseconds) at WatchedUntil: on the same boot, a step
	// of the wall clock while nodegc was down shows against them (see
	// stepWhileDown). Empty in files written before nodegc kept them, or
	// where they cannot be read.
	Boot      string           `json:"boot,omitempty"`
	SinceBoot time.Duration    `json:"sinceBoot,omitempty"`
	Images    map[string]Usage `json:"images"`
}

// bootReading is this machine's boot ID and the time since it booted, on
// a clock that is never stepped and counts suspends (CLOCK_BOOTTIME), read
// at one moment; zero when unknown (a fake clock's tests, a machine
// without them).
type bootReading struct {
	id    string
	since time.Duration
}

// stepWhileDown is the step of the wall clock between the state file's
// write, at until, when the machine had been up for saved.since, and now,
// when it has been up for cur.since: on one boot, the wall clock's
// elapsed time against the boot clock's. NTP setting a clock that was
// days behind (a node without a working real-time clock) while nodegc was
// down would otherwise age every record by as much, and the minimum age
// would protect no image pulled before. 0 on another boot, when either
// reading is unknown, or within clockstep.Tolerance.
func stepWhileDown(until time.Time, saved, cur bootReading, now time.Time) time.Duration {
	if until.IsZero() || saved.id == "" || saved.id != cur.id || cur.since < saved.since {
		return 0
	}
	step := now.Round(0).Sub(until.Round(0)) - (cur.since - saved.since)
	if step > -clockstep.Tolerance && step < clockstep.Tolerance {
		return 0
	}
	return step
}

// errDatedAhead marks loadState's warning about records dated after now:
// the state was read, and those records count from now.
var errDatedAhead = errors.New("records dated ahead of the clock")

// loadState reads the usage records in dir, as of now, for node. A missing
// file gives an empty state; a record with a zero first-detected time
// counts from now, and so do times after now, with a warning error. A
// corrupt, unreadable or unknown-version file is renamed aside (to
// images.json.corrupt-<time>), and so is a file written for another node
// than node (to images.json.othernode-<time>): a disk cloned from
// a template node, or a node renamed. An empty state is then returned
// with a warning error describing what happened; the caller logs it and
// goes on. stamp says that the file names no node (written before nodegc
// kept one): the next save should name node. An empty node reads any
// file.
//
// With readOnly, an unusable file is left where it is: the state starts
// empty and the warning says so.
func loadState(dir string, now time.Time, readOnly bool, node string) (usage map[string]Usage, stamp bool, watched watch, warning error) {
	return loadStateAt(dir, now, readOnly, node, bootReading{})
}

// loadStateAt is loadState on a machine whose boot clock reads boot now:
// a step of the wall clock since the file's write, on this boot
// (stepWhileDown), moves every time it keeps by as much, before anything
// else is made of them, and watched.shift says by how much.
func loadStateAt(dir string, now time.Time, readOnly bool, node string, boot bootReading) (usage map[string]Usage, stamp bool, watched watch, warning error) {
	if !readOnly {
		removeStaleTemps(dir, now)
	}
	p := filepath.Join(dir, StateFileName)
	data, err := readLimited(p, maxStateSize)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]Usage{}, false, watch{}, nil
	}
	var problem error
	aside := fmt.Sprintf("%s.corrupt-%s", p, now.UTC().Format("20060102T150405Z"))
	discarded := discardedUnusable
	if err != nil {
		problem = err
	} else {
		var sf stateFile
		switch err := json.Unmarshal(data, &sf); {
		case err != nil:
			problem = fmt.Errorf("not valid JSON: %w", err)
		case sf.Version != stateVersion:
			problem = fmt.Errorf("unknown version %d (this nodegc reads version %d)", sf.Version, stateVersion)
		case node != "" && sf.Node != "" && sf.Node != node:
			problem = fmt.Errorf("written for node %q, and this is node %q: a disk cloned from another node, or a node renamed? "+
				"Its last-used times describe another node's images", sf.Node, node)
			aside = fmt.Sprintf("%s.othernode-%s", p, now.UTC().Format("20060102T150405Z"))
			discarded = discardedOtherNode
		default:
			if sf.Images == nil {
				sf.Images = map[string]Usage{}
			}
			step := stepWhileDown(sf.WatchedUntil, bootReading{id: sf.Boot, since: sf.SinceBoot}, boot, now)
			if step != 0 {
				// Not Usage.Arrived: the runtime's time, which the step
				// did not move either; a step forward counts in
				// Usage.SteppedForward.
				for id, u := range sf.Images {
					u.FirstDetected, u.LastUsed = shifted(u.FirstDetected, step), shifted(u.LastUsed, step)
					if step > 0 {
						u.SteppedForward += step
					}
					sf.Images[id] = u
				}
				sf.WatchedSince, sf.WatchedUntil = shifted(sf.WatchedSince, step), shifted(sf.WatchedUntil, step)
			}
			future := 0
			for id, u := range sf.Images {
				switch {
				case u.FirstDetected.IsZero():
					// A record without a first-detected time gives no age:
					// it counts from now, so the minimum age protects the
					// image.
					u.FirstDetected = now
					if u.LastUsed.Before(now) {
						u.LastUsed = time.Time{}
					}
				case u.FirstDetected.After(now) || u.LastUsed.After(now):
					// Saved while the clock ran ahead: kept as it is, the
					// record would hold the image younger than the minimum
					// age, or as the most recently used, until the clock
					// caught up. It counts from now.
					u.FirstDetected, u.LastUsed = earliest(u.FirstDetected, now), earliest(u.LastUsed, now)
					future++
				default:
					continue
				}
				sf.Images[id] = u
			}
			stamp := node != "" && sf.Node == ""
			w := watch{since: sf.WatchedSince, until: sf.WatchedUntil, shift: step}
			if future > 0 {
				return sf.Images, stamp, w, fmt.Errorf("state file %s: %w: %d image records dated after the clock (%s; was it ahead, and stepped back since?) count from now",
					p, errDatedAhead, future, now.UTC().Format(time.RFC3339))
			}
			return sf.Images, stamp, w, nil
		}
	}
	if readOnly {
		return map[string]Usage{}, false, watch{}, fmt.Errorf("state file %s unusable (%v); left as it is, image usage read as empty", p, problem)
	}
	aside = unusedName(aside)
	if err := os.Rename(p, aside); err != nil {
		return map[string]Usage{}, false, watch{}, &stateDiscarded{reason: discarded,
			err: fmt.Errorf("state file %s unusable (%v) and could not be set aside: %w; starting with empty image usage", p, problem, err)}
	}
	pruneAside(dir, aside)
	return map[string]Usage{}, false, watch{}, &stateDiscarded{reason: discarded,
		err: fmt.Errorf("state file %s unusable (%v); moved it to %s and started with empty image usage", p, problem, aside)}
}

// Why a state file's records were discarded (stateDiscarded; metric
// label).
const (
	discardedUnusable  = "unusable"   // unreadable, not JSON, or of another version
	discardedOtherNode = "other_node" // written for another node
)

var discardedReasons = []string{discardedUnusable, discardedOtherNode}

// stateDiscarded is loadState's warning when it discarded the state
// file's records (and set the file aside, unless renaming failed): the
// image GC starts over with empty usage. The Manager counts it in
// nodegc_image_state_discarded_total.
type stateDiscarded struct {
	reason string
	err    error
}

func (e *stateDiscarded) Error() string { return e.err.Error() }
func (e *stateDiscarded) Unwrap() error { return e.err }

// watchGapCovered is the longest break in nodegc's watch of the node that
// does not start a new watch (watch.continuousSince): a rollout of the agent, a
// rebuild of the image GC for a restarted runtime. A pod whose containers
// are made, run and removed within it goes unseen (containerd 2.x also
// replays the container events of the last 5 minutes to a subscriber
// when it has no other).
const watchGapCovered = time.Minute

// watch is the watch a state file records (stateFile.WatchedSince and
// WatchedUntil); zero when it records none.
type watch struct {
	since, until time.Time
	// shift is the step of the wall clock while nodegc was down that the
	// file's times were moved by (stepWhileDown).
	shift time.Duration
}

// continuousSince is when the watch nodegc goes on with at now began: the
// file's, when it was written no longer than watchGapCovered ago; else now
// (the agent was down longer, or crashed long after its last write, or
// the file is older than these times): a use in the break is unknown.
func (w watch) continuousSince(now time.Time) time.Time {
	if w.since.IsZero() || w.until.IsZero() || w.since.After(w.until) ||
		w.until.After(now) || now.Sub(w.until) > watchGapCovered {
		return now
	}
	return w.since
}

// keptAside is how many state files set aside of each kind (corrupt,
// another node's) are kept, the newest: enough to look into what happened,
// not a directory that fills at every start.
const keptAside = 3

// pruneAside removes the state files set aside in dir but the newest
// keptAside of each kind (their names end in the time they were set aside,
// which sorts as the time does), among them always just, the one just set
// aside: a clock behind (a node booted in 1970) names it before the
// others.
func pruneAside(dir, just string) {
	for _, kind := range []string{"corrupt", "othernode"} {
		aside, _ := filepath.Glob(filepath.Join(dir, StateFileName+"."+kind+"-*"))
		keep := keptAside
		if i := slices.Index(aside, just); i >= 0 {
			aside, keep = slices.Delete(aside, i, i+1), keptAside-1
		}
		slices.Sort(aside)
		for _, p := range aside[:max(0, len(aside)-keep)] {
			os.Remove(p)
		}
	}
}

// unusedName is name, or, when a file has it (one set aside in the same
// second), name with the first of -2, -3, ... that none has.
func unusedName(name string) string {
	p := name
	for i := 2; ; i++ {
		if _, err := os.Lstat(p); err != nil {
			return p // none has it, or the rename tells why not
		}
		p = fmt.Sprintf("%s-%d", name, i)
	}
}

// staleTempAge is how old a temporary state file must be to count as left
// by a write that was killed: a younger one may be another agent's write
// under way (where the agent could not lock the state directory, and two
// run side by side).
const staleTempAge = time.Minute

// removeStaleTemps removes the temporary files of writes killed between
// their creation and the rename (saveState removes its own otherwise).
func removeStaleTemps(dir string, now time.Time) {
	temps, _ := filepath.Glob(filepath.Join(dir, StateFileName+".tmp-*"))
	for _, p := range temps {
		if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && now.Sub(st.ModTime()) > staleTempAge {
			os.Remove(p)
		}
	}
}

// saveState writes the records of node, and the watch they come from,
// atomically: a temporary file in dir, fsync,
// rename over the old file, fsync of the directory. A crash at any point
// leaves either the old or the new file, whole.
func saveState(dir, node string, images map[string]Usage, watchedSince, watchedUntil time.Time, boot bootReading) error {
	data, err := json.Marshal(stateFile{Version: stateVersion, Node: node, WatchedSince: watchedSince, WatchedUntil: watchedUntil,
		Boot: boot.id, SinceBoot: boot.since, Images: images})
	if err != nil {
		return fmt.Errorf("encoding image state: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating state directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, StateFileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing image state: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing image state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing image state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing image state: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, StateFileName)); err != nil {
		return fmt.Errorf("replacing image state: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing state directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing state directory: %w", err)
	}
	return nil
}

func readLimited(p string, limit int64) ([]byte, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return os.ReadFile(p)
}
