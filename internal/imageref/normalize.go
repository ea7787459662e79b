package imageref

import (
	_ "crypto/sha512" // go-digest accepts sha384 and sha512 digests only when linked in
	"errors"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// normalized is a name pattern made fully qualified.
type normalized struct {
	segments []segment
	// registryReading, when set, is the other reading of a name whose
	// first component has wildcards and was read as a Docker Hub name:
	// the components as written, the first one a registry.
	registryReading []segment
}

// normalize makes the name pattern comps fully qualified the way the
// reference library makes a name so: the library itself decides, on the
// pattern with every wildcard replaced by a letter or digit, which
// component is the registry and what it puts in front (docker.io,
// library), and the wildcards are then put back in place. The library only
// ever prepends components and renames the registry (index.docker.io), so
// the components as written are the tail of the result. A name that does
// not normalise is kept as written, with the reason it can never match.
//
// A first component with wildcards may stand for a registry or for a
// Docker Hub name ("*/app" is quay.io/app as well as docker.io/team/app):
// when the library reads it as a Docker Hub name, the components as written
// are kept too, as the registry reading.
func normalize(comps []string) (normalized, string) {
	asWritten := normalized{segments: make([]segment, len(comps))}
	for i, c := range comps {
		asWritten.segments[i] = newSegment(c)
	}
	if len(comps) == 1 && comps[0] == "" {
		return asWritten, whyNoRepository
	}
	if slices.Contains(comps, "") {
		return asWritten, `empty path component (a leading, trailing or double "/")`
	}
	stand := make([]string, len(comps)) // wildcards replaced
	for i, c := range comps {
		stand[i], _, _ = placeholder(c)
	}
	if len(stand) > 1 && strings.ContainsAny(stand[0], ".:") {
		// A registry host, in any case: the library renames Docker Hub
		// (docker.io, index.docker.io) only when written in lower case.
		stand[0] = strings.ToLower(stand[0])
	}
	if comps[0] == "**" {
		// Any registry and path: matched against the fully qualified
		// name as written. What follows the leading "**" must be able to
		// end a name: a name of its own, or a path under some registry.
		k := 0
		for k < len(comps) && comps[k] == "**" {
			k++
		}
		if k == len(comps) {
			return asWritten, ""
		}
		rest := strings.Join(stand[k:], "/")
		if _, err := reference.ParseNormalizedNamed(rest); err == nil {
			return asWritten, ""
		}
		if _, err := reference.ParseNormalizedNamed("registry.example/" + rest); err != nil {
			return asWritten, nameProblem("registry.example/"+rest, err)
		}
		return asWritten, ""
	}
	joined := strings.Join(stand, "/")
	named, err := reference.ParseNormalizedNamed(joined)
	if err != nil {
		return asWritten, nameProblem(joined, err)
	}
	full := append([]string{reference.Domain(named)}, strings.Split(reference.Path(named), "/")...)
	out := normalized{segments: make([]segment, len(full))}
	for i, c := range full {
		out.segments[i] = segment{glob: c, literal: true}
	}
	n := len(comps)
	// Was the first component read as part of the path (Docker Hub)?
	if len(full) > n && slices.Equal(full[len(full)-n:], stand) {
		for i, c := range comps {
			out.segments[len(full)-n+i] = newSegment(c)
		}
		if n > 1 && hasWildcard(comps[0]) {
			out.registryReading = slices.Clone(asWritten.segments)
			out.registryReading[0] = hostSegment(out.registryReading[0])
		}
		return out, ""
	}
	// The first component is the registry, perhaps renamed
	// (index.docker.io); "library" may follow it.
	if hasWildcard(comps[0]) {
		out.segments[0] = newSegment(comps[0])
	}
	out.segments[0] = hostSegment(out.segments[0])
	if n > 1 && len(full) > n && comps[1] == "**" {
		// The library put "library" before a path that starts with "**"
		// (docker.io/** read as an official image), but "**" may stand
		// for "library/..." as well as for a user's "team/app": keep the
		// path as written.
		out.segments = append(out.segments[:1], asWritten.segments[1:]...)
		return out, ""
	}
	for i := 1; i < n; i++ {
		out.segments[len(full)-n+i] = newSegment(comps[i])
	}
	return out, ""
}

// hostSegment makes the registry's segment match regardless of case, as
// host names do: names are matched with their registry in lower case
// (parseName).
func hostSegment(s segment) segment {
	s.glob = strings.ToLower(s.glob)
	return s
}

func newSegment(c string) segment {
	if c == "**" {
		return segment{glob: c, any: true}
	}
	return segment{glob: c, literal: !hasWildcard(c)}
}

// placeholder replaces every wildcard of glob by "0", which a reference
// accepts wherever a wildcard can stand for something (a registry, a port,
// a path component, a tag), and resolves escapes. It also counts the "*"
// runs (which may stand for nothing) and the literal characters.
func placeholder(glob string) (s string, stars, literals int) {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			for i+1 < len(glob) && glob[i+1] == '*' {
				i++
			}
			b.WriteByte('0')
			stars++
		case '?':
			b.WriteByte('0')
		case '[':
			// Parse checked the syntax: the class is closed.
			j := i + 1
			if j < len(glob) && glob[j] == '^' {
				j++
			}
			for j < len(glob) && glob[j] != ']' {
				if glob[j] == '\\' {
					j++
				}
				j++
			}
			i = j
			b.WriteByte('0')
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteByte(glob[i])
				literals++
			}
		default:
			b.WriteByte(c)
			literals++
		}
	}
	return b.String(), stars, literals
}

// nameProblem says why the name s (wildcards replaced) is not a valid
// repository name, given the library's error.
func nameProblem(s string, err error) string {
	switch {
	case len(s) == 64 && reference.IdentifierRegexp.MatchString(s):
		return whyImageID
	case errors.Is(err, reference.ErrNameTooLong):
		return "the repository path has more than 255 characters"
	}
	if _, lowerErr := reference.ParseNormalizedNamed(strings.ToLower(s)); lowerErr == nil {
		return whyUpperCase
	}
	return whyCharacters
}

// Why a name can never match, as nameProblem and normalize say it (fix.go
// adds what to write).
const (
	whyNoRepository = "no repository name"
	whyImageID      = "a name of 64 hexadecimal digits is an image ID"
	whyUpperCase    = "upper case in the repository path (references are lowercase)"
	whyCharacters   = `the repository name holds characters a reference cannot (a registry is a host name with an optional port; ` +
		`a path component is lowercase letters and digits separated by ".", "_", "__" or "-")`
)

// anyName is a valid name to check tags with.
var anyName, _ = reference.WithName("x")

// tagProblem says why no tag can match the tag pattern, or "".
func tagProblem(tag string) string {
	s, stars, _ := placeholder(tag)
	if len(s)-stars > 128 {
		return "a tag has at most 128 characters"
	}
	if _, err := reference.WithTag(anyName, s[:min(len(s), 128)]); err != nil {
		return `a tag is letters, digits, "_", "." and "-", and does not start with "." or "-"`
	}
	return ""
}

// digestLength is the length of the hexadecimal part per algorithm.
var digestLength = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}

// digestProblem says why no digest (or image ID) can match the digest
// pattern d, or "". A literal digest is checked by the reference library;
// with wildcards, the characters that are literal are checked.
func digestProblem(d string) string {
	const why = "a digest is an algorithm and lowercase hexadecimal digits, such as sha256:<64 hex digits>"
	if !hasWildcard(d) {
		if _, err := reference.Parse("x@" + d); err != nil {
			return why
		}
		return ""
	}
	algo, hex, ok := strings.Cut(d, ":")
	if !ok || hasWildcard(algo) {
		return "" // a wildcard may stand for the algorithm and the ":"
	}
	want, known := digestLength[algo]
	if !known {
		return why
	}
	s, stars, _ := placeholder(hex)
	if strings.Trim(s, "0123456789abcdef") != "" || (stars == 0 && len(s) != want) || len(s)-stars > want {
		return why
	}
	return ""
}
