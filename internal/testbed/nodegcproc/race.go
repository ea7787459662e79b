//go:build race

package nodegcproc

// raceEnabled: this test binary runs with the race detector (go test
// -race), so Build builds nodegc with it too.
const raceEnabled = true
