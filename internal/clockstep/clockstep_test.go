package clockstep

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// TestFollower: the wall clock's drift against the monotonic clock between
// two readings is no step; a difference past the tolerance either way is,
// once, with the wall clock at the readings around it.
func TestFollower(t *testing.T) {
	var mono time.Duration
	f := Follower{Monotonic: func() time.Duration { return mono }}
	wall := t0
	for _, tc := range []struct {
		name       string
		wall, mono time.Duration
		want       time.Duration
	}{
		{"first reading", time.Second, time.Second, 0},
		{"in step", time.Second, time.Second, 0},
		{"slewed", time.Second + time.Millisecond, time.Second, 0},
		{"stepped forward", time.Hour + time.Second, time.Second, time.Hour},
		{"in step after the step", time.Second, time.Second, 0},
		{"stepped back", -time.Hour + time.Second, time.Second, -time.Hour},
		{"suspended (the monotonic clock stopped)", 10 * time.Minute, 0, 10 * time.Minute},
	} {
		before := wall
		wall, mono = wall.Add(tc.wall), mono+tc.mono
		got := f.Follow(wall)
		if got.By != tc.want {
			t.Errorf("%s: step %v, want %v", tc.name, got.By, tc.want)
		}
		if tc.want != 0 && (!got.Before.Equal(before) || !got.After.Equal(wall)) {
			t.Errorf("%s: step between %v and %v, want between %v and %v", tc.name, got.Before, got.After, before, wall)
		}
	}
	if got := (&Follower{}).Follow(t0); got.By != 0 {
		t.Errorf("without a monotonic clock (a fake clock): step %v, want 0", got.By)
	}
}

// TestSince: the real clock's monotonic reading moves forward.
func TestSince(t *testing.T) {
	mono := Since(time.Now())
	a := mono()
	time.Sleep(time.Millisecond)
	if b := mono(); b <= a {
		t.Errorf("monotonic readings %v then %v; want them to grow", a, b)
	}
}
