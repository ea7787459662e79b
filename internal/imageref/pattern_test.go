package imageref

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

var (
	id     = "sha256:" + strings.Repeat("0123abcd", 8)
	digest = "sha256:" + strings.Repeat("fedc9876", 8)
)

// TestMatch: one pattern against one image name as CRI lists it (or, for
// "id:" names, against an image ID).
func TestMatch(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern, name string
		want          bool
	}{
		"familiar, qualified":                {"nginx:1.25", "docker.io/library/nginx:1.25", true},
		"spaces around, quoted in YAML":      {" nginx:1.25 ", "docker.io/library/nginx:1.25", true},
		"tab after":                          {"team/app:*\t", "docker.io/team/app:v1", true},
		"spaces around an image ID":          {" sha256:0123abcd* ", "id:" + id, true},
		"space inside still never matches":   {"nginx :1.25", "docker.io/library/nginx:1.25", false},
		"qualified, familiar":                {"docker.io/library/nginx:1.25", "nginx:1.25", true},
		"familiar, familiar":                 {"nginx:1.25", "nginx:1.25", true},
		"library, qualified":                 {"library/nginx:1.25", "docker.io/library/nginx:1.25", true},
		"short hub, qualified":               {"docker.io/nginx:1.25", "docker.io/library/nginx:1.25", true},
		"legacy hub, qualified":              {"index.docker.io/nginx:1.25", "docker.io/library/nginx:1.25", true},
		"hub user, qualified":                {"team/app:v1", "docker.io/team/app:v1", true},
		"hub user, familiar":                 {"docker.io/team/app:v1", "team/app:v1", true},
		"hub user is not official":           {"team/app:v1", "docker.io/library/app:v1", false},
		"familiar is not another registry":   {"nginx:1.25", "quay.io/library/nginx:1.25", false},
		"registry":                           {"registry.example/team/app:v1", "registry.example/team/app:v1", true},
		"registry is not hub":                {"registry.example/team/app:v1", "docker.io/team/app:v1", false},
		"port":                               {"127.0.0.1:5000/team/app:v1", "127.0.0.1:5000/team/app:v1", true},
		"other port":                         {"127.0.0.1:5000/team/app:v1", "127.0.0.1:5001/team/app:v1", false},
		"wildcard port":                      {"127.0.0.1:*/team/app:v1", "127.0.0.1:41235/team/app:v1", true},
		"localhost":                          {"localhost/app:v1", "localhost/app:v1", true},
		"localhost is not hub":               {"localhost/app:v1", "docker.io/localhost/app:v1", false},
		"localhost with a port":              {"localhost:5000/app", "localhost:5000/app:v1", true},
		"localhost with a port, any tag":     {"localhost:5000/x:*", "localhost:5000/x:v1", true},
		"ipv6 registry, escaped":             {`\[::1\]:5000/app:v1`, "[::1]:5000/app:v1", true},
		"wildcard registry":                  {"*.example/team/app:v1", "registry.example/team/app:v1", true},
		"wildcard registry is not hub":       {"*.example/team/app:v1", "docker.io/team/app:v1", false},
		"wildcard first component is hub":    {"*/app:v1", "docker.io/team/app:v1", true},
		"wildcard first component, library":  {"*/app:v1", "docker.io/library/app:v1", true},
		"wildcard first component, registry": {"*/app:v1", "registry.example/app:v1", true},
		"wildcard first component, port":     {"*/tools/debug:*", "127.0.0.1:5000/tools/debug:1.0", true},
		"wildcard first component, deeper":   {"*/app:v1", "registry.example/team/app:v1", false},
		"prefix first component, registry":   {"team-*/app", "team-registry.example/app:1", true},
		"prefix first component, hub":        {"team-*/app", "docker.io/team-a/app:1", true},
		"star alone is official images":      {"*", "docker.io/library/nginx:1", true},
		"star alone, hub user":               {"*", "docker.io/team/app:1", false},
		"hub wildcard namespace":             {"docker.io/*/app", "docker.io/team/app:1", true},
		"star within a component":            {"registry.example/team/app-*:v1", "registry.example/team/app-web:v1", true},
		"star does not cross a slash":        {"registry.example/*:v1", "registry.example/team/app:v1", false},
		"question mark":                      {"registry.example/team/app:v?", "registry.example/team/app:v1", true},
		"question mark, two chars":           {"registry.example/team/app:v?", "registry.example/team/app:v10", false},
		"class":                              {"registry.example/team/app:v[0-9]", "registry.example/team/app:v7", true},
		"negated class":                      {"registry.example/team/app:v[^0-9]", "registry.example/team/app:v7", false},
		"escaped star is literal":            {`registry.example/team/app:v\*`, "registry.example/team/app:v1", false},
		"double star first, hub":             {"**/agent", "docker.io/library/agent:1", true},
		"double star first, deep":            {"**/agent", "registry.example/a/b/c/agent:1", true},
		"double star first, suffix only":     {"**/agent", "registry.example/a/my-agent:1", false},
		"double star first, two components":  {"**/team/agent", "registry.example/team/agent:1", true},
		"double star first, wrong parent":    {"**/team/agent", "registry.example/other/agent:1", false},
		"double star middle, zero":           {"registry.example/**/agent", "registry.example/agent:1", true},
		"double star middle, many":           {"registry.example/**/agent", "registry.example/a/b/agent:1", true},
		"double star middle, other registry": {"registry.example/**/agent", "other.example/a/agent:1", false},
		"double star last":                   {"registry.example/team/**", "registry.example/team/a/b:1", true},
		"double star last, zero":             {"registry.example/team/**", "registry.example/team:1", true},
		"double star last, other team":       {"registry.example/team/**", "registry.example/other/a:1", false},
		"two double stars":                   {"**/team/**/agent", "registry.example/x/team/y/z/agent:1", true},
		"two double stars, no team":          {"**/team/**/agent", "registry.example/x/y/agent:1", false},
		"double star with hub namespace":     {"team/**", "docker.io/team/a/b:1", true},
		"hub, double star: a user's image":   {"docker.io/**", "docker.io/bitnami/redis:7", true},
		"hub, double star: official image":   {"docker.io/**", "docker.io/library/redis:7", true},
		"hub, double star: other registry":   {"docker.io/**", "quay.io/bitnami/redis:7", false},
		"legacy hub, double star":            {"index.docker.io/**", "docker.io/bitnami/redis:7", true},
		"hub, double star, tag":              {"docker.io/**:*", "docker.io/bitnami/redis:7", true},
		"hub, double star, then a name":      {"docker.io/**/redis", "docker.io/bitnami/redis:7", true},
		"hub, star is official only":         {"docker.io/*", "docker.io/bitnami/redis:7", false},
		"double star alone":                  {"**", "registry.example/anything:1", true},
		"double star alone, digest":          {"**", "registry.example/anything@" + digest, true},
		"double star in a component is star": {"registry.example/team**/app", "registry.example/team-a/app:1", true},
		"no tag: every tag":                  {"registry.k8s.io/pause", "registry.k8s.io/pause:3.10", true},
		"no tag: every digest":               {"registry.k8s.io/pause", "registry.k8s.io/pause@" + digest, true},
		"no tag: not a longer name":          {"registry.k8s.io/pause", "registry.k8s.io/pause-extra:1", false},
		"no tag: not a deeper name":          {"registry.k8s.io/pause", "registry.k8s.io/pause/x:1", false},
		"latest is not implied":              {"nginx:latest", "docker.io/library/nginx:1.25", false},
		"latest":                             {"nginx:latest", "docker.io/library/nginx:latest", true},
		"tag pattern, digest name":           {"nginx:*", "docker.io/library/nginx@" + digest, false},
		"digest pattern, tag name":           {"nginx@sha256:*", "docker.io/library/nginx:1.25", false},
		"digest":                             {"nginx@" + digest, "docker.io/library/nginx@" + digest, true},
		"digest prefix":                      {"nginx@sha256:fedc*", "docker.io/library/nginx@" + digest, true},
		"other digest":                       {"nginx@sha256:0000*", "docker.io/library/nginx@" + digest, false},
		"digest, other repository":           {"nginx@" + digest, "docker.io/library/redis@" + digest, false},
		"digest in any repository":           {"**@" + digest, "registry.example/a/b@" + digest, true},
		"tag and digest: digest decides":     {"nginx:9.9@" + digest, "docker.io/library/nginx@" + digest, true},
		"image ID":                           {id, "id:" + id, true},
		"image ID prefix":                    {"sha256:0123abcd*", "id:" + id, true},
		"image ID, listed bare":              {id, "id:" + strings.TrimPrefix(id, "sha256:"), true},
		"image ID prefix, listed bare":       {"sha256:0123abcd*", "id:" + strings.TrimPrefix(id, "sha256:"), true},
		"other image ID, listed bare":        {"sha256:ffff*", "id:" + strings.TrimPrefix(id, "sha256:"), false},
		"other image ID":                     {"sha256:ffff*", "id:" + id, false},
		"image ID pattern, digest name":      {digest, "docker.io/library/nginx@" + digest, false},
		"name pattern, image ID":             {"*", "id:" + id, false},
		"double star, image ID":              {"**", "id:" + id, false},
		"invalid name matched as written":    {"registry.example/Team/app:v1", "registry.example/Team/app:v1", true},
		"registry in upper case":             {"Registry.Example/team/app:v1", "registry.example/team/app:v1", true},
		"registry listed in upper case":      {"registry.example/team/app:v1", "REGISTRY.example/team/app:v1", true},
		"wildcard registry in upper case":    {"*.EXAMPLE/team/app:v1", "registry.example/team/app:v1", true},
		"path case still matters":            {"registry.example/team/app:v1", "registry.example/Team/app:v1", false},
		"Docker Hub in upper case":           {"Docker.io/nginx:*", "docker.io/library/nginx:1.25", true},
		"Docker Hub's old name in any case":  {"Index.Docker.io/nginx:*", "docker.io/library/nginx:1.25", true},
		"Docker Hub in capitals, user path":  {"DOCKER.IO/team/app", "docker.io/team/app:v2", true},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			var got bool
			if imageID, ok := strings.CutPrefix(tc.name, "id:"); ok {
				got = p.MatchID(imageID)
			} else {
				got = p.Match(tc.name)
			}
			if got != tc.want {
				t.Errorf("pattern %q (normalised %s), name %q: match = %v, want %v", tc.pattern, p, tc.name, got, tc.want)
			}
		})
	}
}

// TestNormalised: what a pattern means, fully qualified.
func TestNormalised(t *testing.T) {
	for pattern, want := range map[string]string{
		"nginx":                          "docker.io/library/nginx",
		"nginx:*":                        "docker.io/library/nginx:*",
		"ngin?":                          "docker.io/library/ngin?",
		"*":                              "docker.io/library/*",
		"library/nginx":                  "docker.io/library/nginx",
		"docker.io/nginx":                "docker.io/library/nginx",
		"docker.io/*":                    "docker.io/library/*",
		"docker.io/**":                   "docker.io/**",
		"index.docker.io/**:v1":          "docker.io/**:v1",
		"docker.io/**/app":               "docker.io/**/app",
		"index.docker.io/team/app":       "docker.io/team/app",
		"team/app:v1":                    "docker.io/team/app:v1",
		"*/app":                          "docker.io/*/app",
		"team-*/app":                     "docker.io/team-*/app",
		"team/**/app":                    "docker.io/team/**/app",
		"*.example/app":                  "*.example/app",
		"registry.*/app":                 "registry.*/app",
		"127.0.0.1:*/team/app:v1":        "127.0.0.1:*/team/app:v1",
		"localhost/app":                  "localhost/app",
		"**/app:*":                       "**/app:*",
		"**":                             "**",
		"nginx:1.25@sha256:*":            "docker.io/library/nginx:1.25@sha256:*",
		"sha256:0123*":                   "sha256:0123*",
		" sha256:0123* ":                 "sha256:0123*",
		" nginx:1.25\t":                  "docker.io/library/nginx:1.25",
		"registry.example/Team/app":      "registry.example/Team/app", // never matches: kept as written
		"https://registry.example/app:1": "https://registry.example/app:1",
	} {
		p, err := Parse(pattern)
		if err != nil {
			t.Errorf("Parse(%q): %v", pattern, err)
			continue
		}
		if got := p.String(); got != want {
			t.Errorf("Parse(%q).String() = %q, want %q", pattern, got, want)
		}
	}
}

// TestVerdicts: a pattern that can never match a valid reference is
// reported by NeverMatches ("never"), one read as another image than it
// names by Misread ("misread"), one read other than as written but meaning
// it by Warnings ("warn"); patterns that can match as they say are none of
// these, including ones close to the limits. The wording is checked in
// pkg/config. (Before, the first two were Warnings too, and config only
// warned of them: each "never" and "misread" row was a warning, but for
// the one-component names starting with a wildcard other than "*" alone,
// and the registry hosts alone, which were silent.)
func TestVerdicts(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern string
		want    string
	}{
		"familiar":                           {"nginx", ""},
		"upper case registry is allowed":     {"Registry.Example/app:v1", ""},
		"tag of 128":                         {"nginx:" + strings.Repeat("a", 128), ""},
		"tag of 128 around a star":           {"nginx:" + strings.Repeat("a", 64) + "*" + strings.Repeat("a", 64), ""},
		"star tag":                           {"nginx:*", ""},
		"double star, path with a dot":       {"**/team.x/app", ""},
		"double star, registry with a port":  {"**/127.0.0.1:5000/app", ""},
		"double star alone":                  {"**", ""},
		"any digest":                         {"**@*", ""},
		"any sha256 digest":                  {"**@sha256:*", ""},
		"full digest":                        {"nginx@" + digest, ""},
		"image ID prefix":                    {"sha256:01*", ""},
		"all image IDs":                      {"sha256:*", ""},
		"sha512 ID":                          {"sha512:" + strings.Repeat("ab", 64), ""},
		"separators":                         {"registry.example/a__b/c-d/e.f_g", ""},
		"ipv6 registry":                      {`\[::1\]:5000/app`, ""},
		"upper case path":                    {"registry.example/team/App", "never"},
		"upper case in a class is not seen":  {"registry.example/team/[A-Z]pp", ""},
		"scheme":                             {"oci://registry.example/app", "never"},
		"trailing slash":                     {"registry.example/app/", "never"},
		"leading slash":                      {"/app", "never"},
		"space":                              {"my app", "never"},
		"spaces around":                      {" nginx:1.25 ", "warn"},
		"colon in a path component":          {"registry.example/a:b/c", "never"},
		"dangling separator":                 {"registry.example/app-", "never"},
		"tag of 129":                         {"nginx:" + strings.Repeat("a", 129), "never"},
		"tag starting with a dash":           {"nginx:-rc1", "never"},
		"empty tag":                          {"nginx:", "never"},
		"empty digest":                       {"nginx@", "never"},
		"short literal digest":               {"nginx@sha256:abc", "never"},
		"unknown algorithm":                  {"nginx@md5:*", "never"},
		"upper case digest":                  {"nginx@sha256:ABC*", "never"},
		"digest too long":                    {"nginx@sha256:" + strings.Repeat("a", 65) + "*", "never"},
		"short literal ID":                   {"sha256:pinned", "never"},
		"bare 64 hex":                        {strings.Repeat("ab", 32), "never"},
		"short image ID, as crictl shows":    {"0123abcd0123a", "misread"},
		"regexp digit class":                 {`ghcr.io/org/app\d`, "misread"},
		"regexp word class":                  {`ghcr.io/org/\w*`, "misread"},
		"regexp class in the tag":            {`nginx:1.\d*`, "misread"},
		"regexp alternation":                 {"ghcr.io/org/(app|web)", "never"},
		"regexp alternation alone":           {"(nginx|redis)", "never"},
		"regexp plus":                        {"ghcr.io/org/app+", "never"},
		"escaped letter":                     {`ngin\x`, ""},
		"short image ID, 12":                 {"0123abcd0123", "misread"},
		"short image ID with a star":         {"0123abcd*", "misread"},
		"hex name with a star, short":        {"abc12*", ""},
		"hex name with a tag":                {"0123abcd0123a:v1", "misread"},
		"hex-looking hub user":               {"0123abcd0123a/app", ""},
		"short hex name":                     {"abc123", ""},
		"no name":                            {":v1", "never"},
		"path too long":                      {"registry.example/" + strings.Repeat("a", 256), "never"},
		"path of 255":                        {"registry.example/" + strings.Repeat("a", 255), ""},
		"double star inside a component":     {"registry.example/a**", "warn"},
		"wildcard first component":           {"*/app", ""},
		"wildcard first component, question": {"?/app", ""},
		"star alone":                         {"*", "misread"},
		"star alone with a tag":              {"*:*", "misread"},
		"one component with a prefix":        {"ngin*", ""},
		"one component, star first":          {"*nginx*", "misread"},
		"one component, star first, tag":     {"*-agent:*", "misread"},
		"one component, question first":      {"?ginx", "misread"},
		"one component, double star first":   {"**nginx", "misread"},
		"double star then a name":            {"**/*nginx*", ""},
		"registry host alone":                {"registry.k8s.io", "misread"},
		"registry host alone, port":          {"registry.example:5000", "misread"},
		"localhost alone":                    {"localhost", "misread"},
		"localhost with a port alone":        {"localhost:5000", "misread"},
		"registry host in capitals":          {"Registry.K8s.io", "misread"},
		"registry host and a repository":     {"registry.k8s.io/pause", ""},
		"localhost with a port and a path":   {"localhost:5000/x:*", ""},
		"localhost with a tag is a name":     {"localhost:v1", ""},
		"regular expression, one component":  {"nginx.*", "misread"},
		"regular expression, with a tag":     {"nginx.*:latest", "misread"},
		"regular expression in the path":     {"ghcr.io/org/app.*", "misread"},
		"regular expression, hub user":       {"org/app.*", "misread"},
		"regular expression inside":          {"ghcr.io/org/app.*-worker", "misread"},
		"dot kept in a class":                {"ghcr.io/org/app[.]*", ""},
		"dot and star in a class":            {"ghcr.io/org/app[.*]", ""},
		"class, then a regular expression":   {"ghcr.io/org/app[.*]-v.*", "misread"},
		"dot escaped":                        {`ghcr.io/org/app\.*`, ""},
		"dot then a letter":                  {"ghcr.io/org/app.v*", ""},
		"host glob keeps its dots":           {"*.dkr.ecr.*.amazonaws.com/**", ""},
		"host glob, then a path":             {"registry.*/team/app", ""},
		"version tag keeps its dots":         {"nginx:1.*", ""},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Parse(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			switch {
			case p.NeverMatches() != "":
				got = "never"
			case p.Misread() != "":
				got = "misread"
			case len(p.Warnings()) > 0:
				got = "warn"
			}
			if got != tc.want {
				t.Errorf("Parse(%q): %q (never %q, misread %q, warnings %q), want %q",
					tc.pattern, got, p.NeverMatches(), p.Misread(), p.Warnings(), tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, pattern := range []string{"", " ", "app-[ab", "nginx:v[0-9", `nginx:v1\`, "nginx[:]", "a[/]b", "nginx@sha256:[ab", "sha256:[ab",
		// An IPv6 registry as a pull writes it: the brackets would be a
		// character class.
		"[::1]:5000/app", "[fd00::1]/team/app:v1", "[2001:db8::5]:443/**"} {
		if p, err := Parse(pattern); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", pattern, p)
		}
	}
	if _, err := Compile([]string{"nginx", "bad["}); err == nil || !strings.Contains(err.Error(), `"bad["`) {
		t.Errorf("Compile error = %v, want one naming the pattern", err)
	}
}

// TestSetRemembers: a Set gives the same answers from memory as when it
// first parses a name, forgets everything past its limit and keeps
// answering right, and is safe for concurrent use.
func TestSetRemembers(t *testing.T) {
	s, err := Compile([]string{"nginx", "**/agent:*", "sha256:0123*"})
	if err != nil {
		t.Fatal(err)
	}
	imgs := []struct {
		id            string
		tags, digests []string
		want          bool
	}{
		{id: "sha256:ffff", tags: []string{"docker.io/library/nginx:1"}, want: true},
		{id: "sha256:ffff", digests: []string{"docker.io/library/nginx@" + digest}, want: true},
		{id: "sha256:ffff", tags: []string{"quay.io/x/agent:1"}, want: true},
		{id: "sha256:ffff", tags: []string{"quay.io/x/agent-2:1", "docker.io/library/redis:1"}},
		{id: id, want: true},
		{id: "sha256:ffff", tags: []string{"quay.io/x/y:1"}, digests: []string{"quay.io/x/y@" + digest}},
	}
	defer func(n int) { maxRemembered = n }(maxRemembered)
	maxRemembered = 3
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 3 {
				for _, im := range imgs {
					if got := s.MatchImage(im.id, im.tags, im.digests); got != im.want {
						t.Errorf("MatchImage(%s, %q, %q) = %v, want %v", im.id, im.tags, im.digests, got, im.want)
					}
				}
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.remembered) > maxRemembered {
		t.Errorf("remembers %d names, limit %d", len(s.remembered), maxRemembered)
	}
	if empty, _ := Compile(nil); !empty.Empty() || empty.MatchImage(id, []string{"nginx:1"}, nil) {
		t.Error("an empty set matched")
	}
}

// TestIDPatternMatchesRepositoryDigests: the digest an operator finds for
// a running image is most often its repository (manifest) digest: the
// imageID kubectl shows for a pod's container
// (docker.io/library/nginx@sha256:M), crictl's and ctr's DIGEST, a
// registry's page. Written as sha256:M in imageGC.exclude, it protects the
// image whose repository digest it is, as it protects the image whose ID
// it is: a digest names one blob, so it cannot be one image's ID and
// another's manifest. Before, it was matched against image IDs only, and
// protected nothing, with no warning.
func TestIDPatternMatchesRepositoryDigests(t *testing.T) {
	s, err := Compile([]string{digest, "sha256:0123abcd*"})
	if err != nil {
		t.Fatal(err)
	}
	const other = "sha256:9999999999999999999999999999999999999999999999999999999999999999"
	for _, tc := range []struct {
		name          string
		id            string
		tags, digests []string
		want          bool
	}{
		{"the image whose repository digest the pattern is", other, []string{"docker.io/library/nginx:1.25"}, []string{"docker.io/library/nginx@" + digest}, true},
		{"pulled by digest alone", other, nil, []string{"registry.example/app@" + digest}, true},
		{"a prefix of a repository digest", other, nil, []string{"registry.example/app@" + id}, true},
		{"the image whose ID the pattern is", id, []string{"docker.io/library/redis:7"}, nil, true},
		{"another image", other, []string{"docker.io/library/redis:7"}, []string{"docker.io/library/redis@" + other}, false},
		{"a tag is not a digest", other, []string{"registry.example/sha256:" + strings.Repeat("fedc9876", 8)[:10]}, nil, false},
	} {
		if got := s.MatchImage(tc.id, tc.tags, tc.digests); got != tc.want {
			t.Errorf("%s: MatchImage(%s, %q, %q) = %v, want %v", tc.name, tc.id, tc.tags, tc.digests, got, tc.want)
		}
	}
}

// FuzzParse: Parse never panics; a compiled pattern matches any name
// without panicking; a pattern without wildcards that is a valid name
// matches that name, and its normalised form means the same.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{"nginx:*", "**/a:*", "127.0.0.1:*/x/y:v1", "sha256:0*", "a/**/b@sha256:*", `\[::1\]:5/a`, "*", "[", "a//b", "x:y:z@@"} {
		f.Add(seed, "docker.io/library/nginx:1")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		p, err := Parse(pattern)
		if err != nil {
			return
		}
		p.Match(name)
		p.MatchID(name)
		if hasWildcard(pattern) || len(p.Warnings()) > 0 || p.NeverMatches() != "" || p.Misread() != "" || p.id {
			return
		}
		if !p.Match(pattern) {
			t.Errorf("pattern %q (normalised %s) does not match itself", pattern, p)
		}
		again, err := Parse(p.String())
		if err != nil {
			t.Fatalf("Parse(%q), normalised from %q: %v", p.String(), pattern, err)
		}
		if !again.Match(pattern) || again.String() != p.String() {
			t.Errorf("normalised %q of %q: matches %v, normalises to %q", p, pattern, again.Match(pattern), again)
		}
	})
}

// BenchmarkMatchImage measures matching the images of a large node at one
// plan: 10,000 images with a tag and a digest each, five patterns. "first"
// parses every name; "next" is every later plan, from memory.
func BenchmarkMatchImage(b *testing.B) {
	type img struct {
		id            string
		tags, digests []string
	}
	imgs := make([]img, 10000)
	for i := range imgs {
		imgs[i] = img{
			id:      fmt.Sprintf("sha256:%064d", i),
			tags:    []string{fmt.Sprintf("registry.example.com/team%d/app%d:v%d", i%50, i%700, i)},
			digests: []string{fmt.Sprintf("registry.example.com/team%d/app%d@sha256:%064d", i%50, i%700, i)},
		}
	}
	patterns := []string{"nginx", "**/critical-agent:*", "registry.k8s.io/*", "registry.example.com/team1/**", "sha256:0000000000001*"}
	plan := func(s *Set) int {
		n := 0
		for _, im := range imgs {
			if s.MatchImage(im.id, im.tags, im.digests) {
				n++
			}
		}
		return n
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			s, _ := Compile(patterns)
			plan(s)
		}
	})
	b.Run("next", func(b *testing.B) {
		s, _ := Compile(patterns)
		plan(s)
		b.ReportAllocs()
		for b.Loop() {
			if plan(s) == 0 {
				b.Fatal("nothing matched")
			}
		}
	})
}
