package imageref

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/distribution/reference"
)

// Pattern is one compiled pattern. See the package documentation for what
// it matches.
type Pattern struct {
	text string
	// id: the pattern is matched against image IDs, with digest as the glob.
	id bool
	// name holds the components of the fully qualified repository name,
	// registry first; orName, when set, another reading of the same
	// pattern (see normalize).
	name, orName      []segment
	tag, digest       string
	hasTag, hasDigest bool
	// idPrefix is the literal start of an image ID pattern: an ID without
	// it is rejected without path.Match.
	idPrefix string
	warnings []string
	// never says why no image reference can match the pattern, and what
	// to write instead; "" when one can. misread says how a pattern that
	// matches some reference is read as something other than its text
	// plainly names, and what to write instead.
	never, misread string
}

// segment is one path component of a name pattern.
type segment struct {
	glob    string
	literal bool // no wildcard: compared with ==
	any     bool // "**": any number of components
}

func (s segment) match(comp string) bool {
	if s.literal {
		return s.glob == comp
	}
	ok, _ := path.Match(s.glob, comp) // the syntax was checked by Parse
	return ok
}

// Parse compiles pattern. The error says which part is not valid
// path.Match syntax; a pattern that is valid syntax but can never match a
// valid reference compiles (matched as written), and NeverMatches says why.
//
// White space around the pattern (quoted in YAML, " nginx:1.25 ") is
// dropped, with a warning: no reference holds it, so the pattern as
// written would exclude nothing, and the one trimmed protects what the
// operator meant. Text still returns the pattern as written.
func Parse(pattern string) (*Pattern, error) {
	trimmed := strings.TrimSpace(pattern)
	if trimmed == "" {
		return nil, errors.New("empty pattern")
	}
	p, err := parse(trimmed)
	if err != nil {
		return nil, err
	}
	if trimmed != pattern {
		p.text = pattern
		p.warnings = append([]string{fmt.Sprintf("has white space around it, which no reference holds: matched as %q", trimmed)}, p.warnings...)
	}
	return p, nil
}

func parse(pattern string) (*Pattern, error) {
	p := &Pattern{text: pattern}
	if isIDPattern(pattern) {
		if err := checkSyntax(pattern); err != nil {
			return nil, err
		}
		p.id, p.digest, p.hasDigest = true, pattern, true
		if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
			p.idPrefix = pattern[:i]
		} else {
			p.idPrefix = pattern
		}
		if why := digestProblem(pattern); why != "" {
			p.never = why + digestFix(pattern, "", "for the images whose ID starts so, ",
				": for an image ID, write sha256: and its hexadecimal digits, all 64 of them or a prefix and *")
		}
		return p, nil
	}

	rest, digest, hasDigest := strings.Cut(pattern, "@")
	name, tag, hasTag := splitTag(rest)
	comps := strings.Split(name, "/")
	if len(comps) > 1 && ipv6RegistryRegexp.MatchString(comps[0]) {
		escaped := `\[` + strings.Replace(pattern[1:], "]", `\]`, 1)
		return nil, fmt.Errorf("%q is an IPv6 registry as a pull writes it, but in a pattern its brackets are a character class "+
			"(one of the characters between them): write %s", comps[0], escaped)
	}
	for _, part := range append(append([]string(nil), comps...), tag, digest) {
		if err := checkSyntax(part); err != nil {
			return nil, err
		}
	}
	p.tag, p.hasTag, p.digest, p.hasDigest = tag, hasTag, digest, hasDigest

	n, why := normalize(comps)
	p.name, p.orName = n.segments, n.registryReading
	if i := strings.Index(pattern, "://"); i >= 0 {
		why = "a reference has no scheme" + suggest(pattern[i+3:])
	} else if why != "" {
		why += nameFix(pattern, name, why)
	}
	if why == "" && hasTag {
		if why = tagProblem(tag); why != "" {
			why += listFix(pattern)
		}
	}
	if why == "" && hasDigest {
		why = digestProblem(digest)
		if why != "" {
			why += digestFix(digest, rest+"@", "for the digests that start so, ", "")
		}
	}
	if why == "" {
		if anyChars, dot, ok := regexpDotStar(comps); ok {
			// Before a registry host alone: "nginx.*" is a regular
			// expression written for nginx and its variants, not a host.
			suffix := pattern[len(name):]
			p.misread = fmt.Sprintf(`has ".*", which in a regular expression is any characters; in a pattern "." is a dot and "*" alone is any characters, `+
				`so it matches only names with a dot there: write %q for any characters, or %q to mean the dot`, anyChars+suffix, dot+suffix)
			return p, nil
		}
	}
	if why == "" {
		if m := regexpClassEscape.FindString(pattern); m != "" {
			// A regular expression's class, read as an escaped letter:
			// "app\d" is the repository appd.
			p.misread = fmt.Sprintf(`has %s, which in a regular expression is a class of characters; in a pattern a backslash `+
				`escapes the next character, so it is the letter %q alone: write "[0-9]" for a digit, or "*" for any characters`, m, m[1:])
			return p, nil
		}
	}
	if host, ok := bareHost(comps, tag, hasTag, hasDigest); ok {
		// Before any reason it can never match (Registry.K8s.io): the
		// mistake is the missing path.
		p.misread = fmt.Sprintf("is a registry host alone, which a reference reads as the Docker Hub image docker.io/library/%s: "+
			"write %q for every image of that registry", pattern, host)
		return p, nil
	}
	p.never = why
	for _, c := range comps {
		if c != "**" && strings.Contains(c, "**") {
			p.warnings = append(p.warnings, `has "**" inside a path component, where it is the same as "*": `+
				`"**" spans path components only as a whole component, as in registry.example/**/app`)
			break
		}
	}
	if why == "" && len(comps) == 1 && shortIDRegexp.MatchString(comps[0]) {
		p.misread = fmt.Sprintf("is a Docker Hub name of hexadecimal digits (%s), which looks like a short image ID "+
			"as crictl images shows it: an image ID pattern is %q", p, "sha256:"+strings.TrimRight(comps[0], "*")+"*")
	}
	if why == "" && len(comps) == 1 && comps[0] != "**" && strings.IndexAny(comps[0], "*?[") == 0 {
		// "*nginx*", "*-agent:*", "*": written as a search of every
		// registry, read as Docker Hub's official images.
		anyRegistry := "**/" + strings.ReplaceAll(comps[0], "**", "*")
		if strings.Trim(comps[0], "*") == "" {
			anyRegistry = "**"
		}
		p.misread = fmt.Sprintf("is a name of one component, so it matches Docker Hub's official images only (%s): "+
			"write %q for any registry, or %q to mean official images only", p, anyRegistry+pattern[len(comps[0]):], p)
	}
	return p, nil
}

// regexpClassEscape matches a regular expression's class escapes (\d, \w,
// \s and their negations), which a glob reads as the escaped letter.
var regexpClassEscape = regexp.MustCompile(`\\[dwsDWS]`)

// bareHost reports whether a name of one component is plainly a registry
// host (it holds a ".", or is localhost), perhaps with a port read as a tag
// (localhost:5000), and returns the pattern for every image of that
// registry. A reference reads such a name as a Docker Hub official image,
// and no official image is named like a host.
func bareHost(comps []string, tag string, hasTag, hasDigest bool) (string, bool) {
	if len(comps) != 1 || hasDigest {
		return "", false
	}
	stand, _, _ := placeholder(comps[0])
	port := hasTag && tag != "" && strings.Trim(tag, "0123456789") == ""
	switch {
	case strings.Contains(stand, "."):
	case strings.EqualFold(stand, "localhost") && (!hasTag || port):
	default:
		return "", false
	}
	switch {
	case port:
		return comps[0] + ":" + tag + "/**", true
	case hasTag:
		return comps[0] + "/**:" + tag, true
	}
	return comps[0] + "/**", true
}

// regexpDotStar reports whether a path component of the name (every
// component but the registry host: the first of several) holds ".*", a
// regular expression's "any characters", and returns the name with it
// written as a glob's "*", and with the dot kept ("[.]*"). A host keeps
// its dots ("*.dkr.ecr.*.amazonaws.com/**"), and so do an escaped one and
// one in a character class ("app[.*]").
func regexpDotStar(comps []string) (anyChars, dot string, ok bool) {
	star, kept := slices.Clone(comps), slices.Clone(comps)
	for i, c := range comps {
		if i == 0 && len(comps) > 1 {
			continue
		}
		at := dotStars(c)
		if len(at) == 0 {
			continue
		}
		ok = true
		var s, k strings.Builder
		last := 0
		for _, j := range at {
			s.WriteString(c[last:j] + "*")
			k.WriteString(c[last:j] + "[.]*")
			last = j + 2
		}
		star[i], kept[i] = s.String()+c[last:], k.String()+c[last:]
	}
	return strings.Join(star, "/"), strings.Join(kept, "/"), ok
}

// dotStars returns where c holds ".*" outside a character class and not
// escaped.
func dotStars(c string) []int {
	var at []int
	inClass := false
	for i := 0; i < len(c); i++ {
		switch {
		case c[i] == '\\':
			i++ // the next character is literal
		case inClass:
			inClass = c[i] != ']'
		case c[i] == '[':
			inClass = true
		case c[i] == '.' && i+1 < len(c) && c[i+1] == '*':
			at = append(at, i)
		}
	}
	return at
}

// shortIDRegexp matches the start of an image ID written without its
// algorithm: 12 to 63 hexadecimal digits (64 are refused as a name), or
// 8 and more before a trailing star.
var shortIDRegexp = regexp.MustCompile(`^([0-9a-f]{12,63}|[0-9a-f]{8,63}\*+)$`)

// ipv6RegistryRegexp matches a first component that is an IPv6 registry
// written unescaped, as in a pull: "[::1]:5000", "[fd00::1]".
var ipv6RegistryRegexp = regexp.MustCompile(`^\[[0-9A-Fa-f:.%]*:[0-9A-Fa-f:.%]*\](:[0-9]+)?$`)

// Warnings says how the pattern, which can match, is read other than as
// written: white space around it dropped, "**" inside a component read as
// "*". Nil when neither. A pattern NeverMatches refuses may have
// warnings too.
func (p *Pattern) Warnings() []string { return p.warnings }

// NeverMatches says why no image reference can match the pattern (upper
// case in the repository path, a malformed digest, characters a reference
// cannot hold, no repository name...) and, where the mistake is plain, what
// to write instead; "" when a reference can match it. Such a pattern still
// compiles and is matched as written (it then protects nothing): a program
// that reads patterns from an operator refuses it.
func (p *Pattern) NeverMatches() string { return p.never }

// Misread says how the pattern, which matches some reference, is read as
// something other than its text plainly names, with what to write for
// either meaning; "" when it is not. The reason starts with "is ...", the
// pattern being its subject. A program that reads patterns from an
// operator refuses such a pattern. So far: a registry host alone
// (registry.k8s.io, localhost:5000), read as
// docker.io/library/registry.k8s.io or as the image localhost with the tag
// 5000; a name of one component starting with a wildcard ("*nginx*",
// "*-agent:*", "*"), written as a search of every registry and read as
// Docker Hub's official images; and a name of one component that is 12 to
// 63 hexadecimal digits, a short image ID read as a Docker Hub official
// image no one publishes.
func (p *Pattern) Misread() string { return p.misread }

// String returns the pattern normalised: the fully qualified name, then the
// tag and digest as written. An image ID pattern is returned as written
// (without white space around it). For
// a first component with wildcards that may also be a registry ("*/app"),
// it shows the Docker Hub reading (docker.io/*/app).
func (p *Pattern) String() string {
	if p.id {
		return p.digest // the pattern as written, white space around it dropped
	}
	var b strings.Builder
	for i, s := range p.name {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(s.glob)
	}
	if p.hasTag {
		b.WriteString(":" + p.tag)
	}
	if p.hasDigest {
		b.WriteString("@" + p.digest)
	}
	return b.String()
}

// Text returns the pattern as written.
func (p *Pattern) Text() string { return p.text }

// Match reports whether name, an image name as CRI lists it in RepoTags
// (repository:tag) or RepoDigests (repository@digest), familiar or fully
// qualified, matches the pattern. An image ID pattern matches no name.
func (p *Pattern) Match(name string) bool {
	r := parseName(name)
	return p.match(&r)
}

// MatchID reports whether id, an image ID such as "sha256:..." (or its
// hexadecimal digits alone, as CRI-O lists it), matches an image ID
// pattern. Other patterns match no ID.
func (p *Pattern) MatchID(id string) bool {
	id = CanonicalID(id)
	if !p.id || !strings.HasPrefix(id, p.idPrefix) {
		return false
	}
	ok, _ := path.Match(p.digest, id)
	return ok
}

func (p *Pattern) match(r *name) bool {
	if p.id {
		return false
	}
	switch {
	case p.hasDigest:
		if r.digest == "" {
			return false
		}
		if ok, _ := path.Match(p.digest, r.digest); !ok {
			return false
		}
	case p.hasTag:
		if r.tag == "" {
			return false
		}
		if ok, _ := path.Match(p.tag, r.tag); !ok {
			return false
		}
	}
	return matchSegments(p.name, r.components) || (p.orName != nil && matchSegments(p.orName, r.components))
}

// matchSegments matches components against segments, "**" standing for
// any number of components. One backtracking point is enough, as for "*"
// in a string: a later "**" can always absorb what an earlier one would.
func matchSegments(segs []segment, comps []string) bool {
	si, ci := 0, 0
	star, starCi := -1, 0
	for ci < len(comps) {
		switch {
		case si < len(segs) && segs[si].any:
			star, starCi = si, ci
			si++
		case si < len(segs) && segs[si].match(comps[ci]):
			si++
			ci++
		case star >= 0:
			starCi++
			si, ci = star+1, starCi
		default:
			return false
		}
	}
	for si < len(segs) && segs[si].any {
		si++
	}
	return si == len(segs)
}

// name is an image name split for matching.
type name struct {
	components  []string // fully qualified: registry first
	tag, digest string
}

// parseName normalises an image name with the reference library, its
// registry in lower case (host names are compared regardless of case). A
// name the library refuses (no runtime should list one) is split as
// written.
func parseName(s string) name {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		rest, digest, _ := strings.Cut(s, "@")
		n, tag, _ := splitTag(rest)
		return name{components: strings.Split(n, "/"), tag: tag, digest: digest}
	}
	r := name{components: append([]string{strings.ToLower(reference.Domain(named))}, strings.Split(reference.Path(named), "/")...)}
	if t, ok := named.(reference.Tagged); ok {
		r.tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		r.digest = d.Digest().String()
	}
	return r
}

// splitTag splits "name:tag"; a ":" before the last "/" belongs to a
// registry port.
func splitTag(s string) (name, tag string, ok bool) {
	if i := strings.LastIndexByte(s, ':'); i > strings.LastIndexByte(s, '/') {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// isIDPattern: "sha256:..." (or sha384, sha512) without "/" or "@" is an
// image ID pattern, not the repository "sha256" with a tag.
func isIDPattern(s string) bool {
	algo, _, ok := strings.Cut(s, ":")
	return ok && (algo == "sha256" || algo == "sha384" || algo == "sha512") && !strings.ContainsAny(s, "/@")
}

func checkSyntax(part string) error {
	if _, err := path.Match(part, ""); err != nil {
		return fmt.Errorf("%w: %q", err, part)
	}
	return nil
}

func hasWildcard(s string) bool { return strings.ContainsAny(s, `*?[\`) }
