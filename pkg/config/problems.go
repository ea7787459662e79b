package config

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Problems returns errs as nodegc prints them: "line N: <error>" when the
// file locates the field (see Line), else "<error>"; in line order, those
// without a line last. l may be nil (no file): then no error has a line.
func (l *Loaded) Problems(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		if flag, ok := l.flagOf(e.Field); ok {
			out = append(out, flag+": "+e.Error())
			continue
		}
		out = append(out, l.locate(e.Field, e.Field, e.Error()+l.flagsNamed(e)))
	}
	sortProblems(out)
	return out
}

// flagsNamed returns, for a rule between fields reported on e.Field, which
// a flag did not set, " (F from --flag)" for each other field F of the
// same struct that e's message names and a flag set (SetByFlag): the
// message quotes that value, which the file did not give. l may be nil.
func (l *Loaded) flagsNamed(e *field.Error) string {
	if l == nil {
		return ""
	}
	parent, _ := splitField(e.Field)
	var b strings.Builder
	for _, path := range slices.Sorted(maps.Keys(l.flags)) {
		if p, name := splitField(path); p == parent && name != "" && path != e.Field && namesField(e.Detail, name) {
			b.WriteString(" (" + name + " from " + l.flags[path] + ")")
		}
	}
	return b.String()
}

// locate returns msg, about the field at path, as the loader reports
// problems and warnings: followed by "(value from the KubeletConfiguration
// document)" when that document filled the field, and preceded by "line N: "
// when the file locates linePath (the field, or an entry of it). l may be
// nil.
func (l *Loaded) locate(path, linePath, msg string) string {
	if l != nil && slices.Contains(l.FromKubelet, path) {
		msg += " (value from the KubeletConfiguration document)"
	}
	if line := l.Line(linePath); line > 0 {
		msg = "line " + strconv.Itoa(line) + ": " + msg
	}
	return msg
}

// flagOf returns the flag that set the field at path, if one did.
func (l *Loaded) flagOf(path string) (string, bool) {
	if l == nil {
		return "", false
	}
	flag, ok := l.flags[path]
	return flag, ok
}

// validateDecoded returns, as Loaded.Problems does, what Validate says of a
// NodeGCConfiguration document that did not decode whole: decoded holds the
// fields that did, lines the document's lines, bad the paths of the fields
// that did not (see decodeInto). kubeletLines are the lines of the
// KubeletConfiguration document, nil without one; kc is that document when
// it decoded without problems, merged first as Decode does, else nil: then
// the fields it would set hold their defaults, not the file's values, and
// count as bad. override, if not nil, changes the defaulted configuration
// before it is validated (WithOverride). Neither decoded nor lines is
// modified.
//
// A problem about a field that failed to decode is left out: its path is, or
// is under, a bad path, or it is a rule between fields of one struct whose
// message names a bad field of that struct (such a field holds its default,
// not a value the file gives). Unknown fields are not bad: a typo hides no
// problem of the field it was meant to be.
func validateDecoded(decoded *NodeGCConfiguration, lines map[string]int, kc *kubeletconfigv1beta1.KubeletConfiguration,
	kubeletLines map[string]int, bad []string, override func(*Loaded)) []string {
	// A shallow copy is enough: mergeKubelet and SetDefaults assign fields
	// (pointers included) and never write through a pointer.
	c := *decoded
	l := &Loaded{Config: &c, lines: maps.Clone(lines)}
	switch {
	case kc != nil:
		mergeKubelet(&c, kc, kubeletLines, l.lines)
	case kubeletLines != nil:
		// Which fields it sets, by merging an empty one into a scratch
		// copy (of what decoded: an explicit zero there does not hide
		// the kubelet's value).
		scratch := *decoded
		unmerged, _ := mergeKubelet(&scratch, &kubeletconfigv1beta1.KubeletConfiguration{}, kubeletLines, maps.Clone(lines))
		bad = append(slices.Clone(bad), unmerged...)
	}
	SetDefaults(&c)
	if override != nil {
		override(l)
		// A field a flag set holds the flag's value, not the file's
		// that failed to decode: it is validated.
		bad = slices.DeleteFunc(slices.Clone(bad), func(b string) bool { _, byFlag := l.flags[b]; return byFlag })
	}
	var errs field.ErrorList
	for _, e := range Validate(&c) {
		if !concernsBadField(e, bad) {
			errs = append(errs, e)
		}
	}
	return l.Problems(errs)
}

// concernsBadField reports whether the validation error e is about a field at
// one of the bad paths: see validateDecoded.
func concernsBadField(e *field.Error, bad []string) bool {
	for _, b := range bad {
		if b == "" || e.Field == b || strings.HasPrefix(e.Field, b+".") || strings.HasPrefix(e.Field, b+"[") {
			return true
		}
		parent, name := splitField(b)
		if name == "" {
			continue // a list item: no rule names it
		}
		if p, _ := splitField(e.Field); p == parent && namesField(e.Detail, name) {
			return true
		}
	}
	return false
}

// splitField splits a field path into its parent and the name of its last
// field: "imageGC.period" gives "imageGC" and "period", "period" gives ""
// and "period". The name is "" when the path ends with a list index.
func splitField(path string) (parent, name string) {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return "", path
	}
	if path[i] == '[' {
		return path[:i], ""
	}
	return path[:i], path[i+1:]
}

// namesField reports whether msg contains name as a whole word: "minAge"
// is named by "greater than minAge (2m)" but not by "minAgeFrom".
func namesField(msg, name string) bool {
	for rest, offset := msg, 0; ; {
		i := strings.Index(rest, name)
		if i < 0 {
			return false
		}
		start, end := offset+i, offset+i+len(name)
		if (start == 0 || !isWordByte(msg[start-1])) && (end == len(msg) || !isWordByte(msg[end])) {
			return true
		}
		rest, offset = msg[start+1:], start+1
	}
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// SortProblems sorts problems as Loaded.Problems and DecodeError sort
// theirs: by their "line N: " prefix, keeping the order of those on one
// line; problems without a line go last.
func SortProblems(problems []string) { sortProblems(problems) }

// sortProblems sorts problems by their "line N: " prefix, keeping the order
// of those on one line; problems without a line go last.
func sortProblems(problems []string) {
	slices.SortStableFunc(problems, func(a, b string) int { return cmp.Compare(sortLine(a), sortLine(b)) })
}

func sortLine(problem string) int {
	if n := lineOf(problem); n > 0 {
		return n
	}
	return math.MaxInt
}

// lineOf returns N of a problem starting with "line N:", else 0.
func lineOf(problem string) int {
	rest, ok := strings.CutPrefix(problem, "line ")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:max(0, strings.IndexByte(rest, ':'))])
	return n
}
