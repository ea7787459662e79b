package ownergcbench

import (
	"slices"
	"testing"
)

// TestRoundOrder: every deleter runs in the first round, one run once only
// in no other; the others each go first in turn, and none always follows
// the same one.
func TestRoundOrder(t *testing.T) {
	tests := map[string]struct {
		once []bool
		want [][]int // by round
	}{
		"every round": {once: []bool{false, false, false},
			want: [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}}},
		"the second once": {once: []bool{false, true, false, false},
			want: [][]int{{0, 1, 2, 3}, {2, 3, 0}, {3, 0, 2}, {0, 2, 3}}},
		"the first once": {once: []bool{true, false},
			want: [][]int{{0, 1}, {1}, {1}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for i, want := range tc.want {
				if got := roundOrder(i, tc.once); !slices.Equal(got, want) {
					t.Errorf("round %d: order %v, want %v", i, got, want)
				}
			}
		})
	}
}
