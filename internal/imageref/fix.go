package imageref

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// What to write instead of a pattern that can never match: each function
// returns a suffix for the reason (": write ..."), or "" when the mistake
// is not plain enough to say.

// suggest is ": write s", s quoted.
func suggest(s string) string { return fmt.Sprintf(": write %q", s) }

// clean reports whether s is a pattern that compiles with nothing to
// refuse: a fix is suggested only when it is one.
func clean(s string) bool {
	p, err := Parse(s)
	return err == nil && p.NeverMatches() == "" && p.Misread() == "" && len(p.Warnings()) == 0
}

// nameFix is what to write for the pattern whose name (a prefix of
// pattern, before its tag and digest) normalize refused with why.
func nameFix(pattern, name, why string) string {
	switch why {
	case whyNoRepository:
		return fmt.Sprintf(": write %q for any repository", "**"+pattern)
	case whyImageID:
		return suggest("sha256:" + name)
	case whyUpperCase:
		if fixed := strings.ToLower(name) + pattern[len(name):]; clean(fixed) {
			return suggest(fixed)
		}
	case whyCharacters:
		if f := listFix(pattern); f != "" {
			return f
		}
		return regexFix(pattern)
	}
	return ""
}

// listFix: several patterns written as one list item, separated by commas
// or white space ("nginx, redis"), or as a shell's braces
// ("app:{v1,v2}"), each written as an item of its own.
func listFix(pattern string) string {
	var items []string
	if i := strings.IndexByte(pattern, '{'); i >= 0 {
		if j := strings.IndexByte(pattern[i:], '}'); j > 0 {
			for _, alt := range strings.Split(pattern[i+1:i+j], ",") {
				items = append(items, pattern[:i]+strings.TrimSpace(alt)+pattern[i+j+1:])
			}
		}
	} else if strings.ContainsFunc(pattern, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		items = strings.FieldsFunc(pattern, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	}
	if len(items) < 2 {
		return ""
	}
	quoted := make([]string, len(items))
	for i, it := range items {
		if !clean(it) {
			return ""
		}
		quoted[i] = strconv.Quote(it)
	}
	return ": write one pattern per list item (" + strings.Join(quoted, ", ") + ")"
}

// regexpHabit matches what a regular expression has and a reference
// cannot: ".*" or ".+" starting a component, anchors, groups, alternation,
// "+", \d and \w.
var regexpHabit = regexp.MustCompile(`(^|/)\.[*+]|[\^$()|+]|\\[dw]`)

// regexFix: a regular expression written for a glob.
func regexFix(pattern string) string {
	if !regexpHabit.MatchString(pattern) {
		return ""
	}
	const hint = ": a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components"
	comps := strings.Split(strings.TrimSuffix(strings.TrimPrefix(pattern, "^"), "$"), "/")
	for i, c := range comps {
		if c == ".*" || c == ".+" {
			comps[i] = "**"
		} else {
			comps[i] = strings.NewReplacer(".*", "*", ".+", "*").Replace(c)
		}
	}
	if fixed := strings.Join(comps, "/"); fixed != pattern && clean(fixed) {
		return hint + "; write " + strconv.Quote(fixed)
	}
	return hint
}

// digestFix is what to write for the digest (or image ID) pattern d that
// digestProblem refused: in lower case, and with a "*" after digits too few
// for a digest (a short ID, a digest cut short), as prefix+d. Else other.
func digestFix(d, prefix, startsSo, other string) string {
	fixed, note := strings.ToLower(d), ""
	if algo, hex, ok := strings.Cut(fixed, ":"); ok && !hasWildcard(fixed) && hex != "" &&
		len(hex) < digestLength[algo] && strings.Trim(hex, "0123456789abcdef") == "" {
		fixed, note = fixed+"*", startsSo
	}
	if fixed != d && digestProblem(fixed) == "" {
		return ": " + note + "write " + strconv.Quote(prefix+fixed)
	}
	return other
}
