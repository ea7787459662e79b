package imageref

import (
	"fmt"
	"strings"
	"sync"
)

// maxRemembered bounds the names a Set remembers; past it, it forgets them
// all and starts again (a node lists a few thousand names).
var maxRemembered = 1 << 16

// Set is a compiled list of patterns. Safe for concurrent use.
type Set struct {
	names []*Pattern // matched against RepoTags and RepoDigests
	ids   []*Pattern // matched against image IDs

	// mu guards remembered: the result for every image name seen. The
	// patterns never change, so a remembered result never goes stale; it
	// only saves parsing the name again at the next plan.
	mu         sync.Mutex
	remembered map[string]bool
}

// Compile compiles patterns; the error names the first invalid one.
// Warnings are the callers' to report (see Pattern.Warnings).
func Compile(patterns []string) (*Set, error) {
	s := &Set{}
	for _, text := range patterns {
		p, err := Parse(text)
		if err != nil {
			return nil, fmt.Errorf("pattern %q: %w", text, err)
		}
		if p.id {
			s.ids = append(s.ids, p)
		} else {
			s.names = append(s.names, p)
		}
	}
	return s, nil
}

// Empty reports whether the set has no pattern.
func (s *Set) Empty() bool { return len(s.names) == 0 && len(s.ids) == 0 }

// MatchImage reports whether an image matches a pattern: by its ID, or by
// one of its names (tags and digests, as CRI lists them). An ID pattern
// (sha256:...) matches the digest of a repository digest too: the digest
// kubectl shows as a container's imageID is the manifest's, and a digest
// names one blob, never one image's ID and another's manifest.
func (s *Set) MatchImage(id string, repoTags, repoDigests []string) bool {
	for _, p := range s.ids {
		if p.MatchID(id) {
			return true
		}
		for _, d := range repoDigests {
			if i := strings.LastIndexByte(d, '@'); i >= 0 && p.MatchID(d[i+1:]) {
				return true
			}
		}
	}
	if len(s.names) == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.matchNames(repoTags) || s.matchNames(repoDigests)
}

func (s *Set) matchNames(names []string) bool {
	for _, n := range names {
		matched, ok := s.remembered[n]
		if !ok {
			r := parseName(n)
			for _, p := range s.names {
				if p.match(&r) {
					matched = true
					break
				}
			}
			if s.remembered == nil || len(s.remembered) >= maxRemembered {
				s.remembered = map[string]bool{}
			}
			s.remembered[n] = matched
		}
		if matched {
			return true
		}
	}
	return false
}
