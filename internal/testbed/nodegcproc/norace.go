//go:build !race

package nodegcproc

// raceEnabled: this test binary runs without the race detector, so Build
// builds nodegc without it too.
const raceEnabled = false
