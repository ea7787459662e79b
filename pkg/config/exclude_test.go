package config

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExcludeWarnings: an exclusion pattern that matches what its text
// says but with a note (white space around it, "**" inside a component) is
// a warning of the loader naming the field, its line and why; a valid
// pattern is silent. The agent still starts. (Patterns that can never
// match, or that read as something else than they plainly say, were
// warnings here too: they are refused now, see
// TestValidateRefusesExcludeThatNeverMatches and TestValidateRefusesMisreadExclude.)
func TestExcludeWarnings(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern string
		want    string // the reason; "" for no warning
	}{
		"familiar":                 {pattern: "nginx:*"},
		"registry with a port":     {pattern: "127.0.0.1:5000/team/app:v1"},
		"any registry":             {pattern: "**/critical-agent:*"},
		"explicit hub namespace":   {pattern: "docker.io/*/critical-agent:*"},
		"hub namespace prefix":     {pattern: "team-*/app"},
		"digest in any repository": {pattern: "**@sha256:" + strings.Repeat("ab", 32)},
		"image ID prefix":          {pattern: "sha256:0123*"},
		"registry host and path":   {pattern: "registry.k8s.io/pause"},
		"localhost with a port":    {pattern: "localhost:5000/x:*"},
		"every image of a host":    {pattern: "registry.k8s.io/**"},
		"official images, written": {pattern: "docker.io/library/*nginx*"},
		"any registry, substring":  {pattern: "**/*nginx*"},
		"one component, prefix":    {pattern: "ngin*"},
		"spaces around":            {pattern: " nginx:1.25\t", want: `has white space around it, which no reference holds: matched as "nginx:1.25"`},
		"double star in a component": {
			pattern: "registry.example/team**/app",
			want:    `has "**" inside a path component, where it is the same as "*": "**" spans path components only as a whole component, as in registry.example/**/app`,
		},
		"wildcard first component": {pattern: "*/critical-agent:*"},
		"a dot, kept in a class":   {pattern: "ghcr.io/org/app[.]*"},
		"a dot, then a letter":     {pattern: "ghcr.io/org/app.v*"},
		"host glob with dots":      {pattern: "*.dkr.ecr.*.amazonaws.com/**"},
		"version tag with dots":    {pattern: "nginx:1.*"},
		"dot and star in a class":  {pattern: "ghcr.io/org/app[.*]"},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(header + "imageGC:\n  exclude:\n  - ok/*\n  - " + strconv.Quote(tc.pattern) + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Fatalf("Validate() = %v; a pattern that matches what it says is no error", errs)
			}
			var want []string
			if tc.want != "" {
				want = []string{fmt.Sprintf("line 6: imageGC.exclude[1]: %q %s", tc.pattern, tc.want)}
			}
			if diff := cmp.Diff(want, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// checkExcludeRefused decodes a file whose imageGC.exclude is ["ok/*",
// pattern] and checks that Validate refuses pattern alone, at its line, with
// want as the detail, and that the loader does not also warn of it.
func checkExcludeRefused(t *testing.T, pattern, want string) {
	t.Helper()
	loaded, err := Decode([]byte(header + "imageGC:\n  exclude:\n  - ok/*\n  - " + strconv.Quote(pattern) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	errs := Validate(loaded.Config)
	wantProblems := []string{fmt.Sprintf("line 6: imageGC.exclude[1]: Invalid value: %q: %s", pattern, want)}
	if diff := cmp.Diff(wantProblems, loaded.Problems(errs)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if len(errs) == 1 && errs[0].Field != "imageGC.exclude[1]" {
		t.Errorf("field %s, want imageGC.exclude[1]", errs[0].Field)
	}
	if len(loaded.Warnings) > 0 {
		t.Errorf("warnings %q for a pattern that is refused", loaded.Warnings)
	}
}

// TestValidateRefusesExcludeThatNeverMatches: an exclusion pattern that can
// never match an image reference protects nothing. Before, it was a warning
// printed once at start, and the agent ran with the image the operator meant
// unprotected; now Validate refuses it at imageGC.exclude[i], naming the
// rule and what to write.
func TestValidateRefusesExcludeThatNeverMatches(t *testing.T) {
	const never = "can never match an image reference: "
	const upper = never + "upper case in the repository path (references are lowercase): write "
	const badDigest = never + "a digest is an algorithm and lowercase hexadecimal digits, such as sha256:<64 hex digits>"
	const chars = never + `the repository name holds characters a reference cannot (a registry is a host name with an optional port; ` +
		`a path component is lowercase letters and digits separated by ".", "_", "__" or "-")`
	hex64 := strings.Repeat("0123abcd", 8)
	for name, tc := range map[string]struct{ pattern, want string }{
		"upper case familiar":      {"Nginx", upper + `"nginx"`},
		"upper case with a tag":    {"MyApp:v1", upper + `"myapp:v1"`},
		"upper case, qualified":    {"docker.io/library/Redis:7", upper + `"docker.io/library/redis:7"`},
		"upper case in the path":   {"registry.example/Team/app:*", upper + `"registry.example/team/app:*"`},
		"upper case with wildcard": {"Ngin*", upper + `"ngin*"`},
		"truncated image ID":       {"sha256:5e1ce4d7a8c9b", badDigest + `: for the images whose ID starts so, write "sha256:5e1ce4d7a8c9b*"`},
		"image ID in upper case":   {"sha256:ABCDEF*", badDigest + `: write "sha256:abcdef*"`},
		"image ID not hex":         {"sha256:pinned", badDigest + ": for an image ID, write sha256: and its hexadecimal digits, all 64 of them or a prefix and *"},
		"truncated digest":         {"nginx:1.25@sha256:0123", badDigest + `: for the digests that start so, write "nginx:1.25@sha256:0123*"`},
		"digest in upper case":     {"nginx@sha256:ABC*", badDigest + `: write "nginx@sha256:abc*"`},
		"list in one item":         {"nginx, redis", chars + `: write one pattern per list item ("nginx", "redis")`},
		"space":                    {"my app:*", chars + `: write one pattern per list item ("my", "app:*")`},
		"regular expression":       {"ghcr.io/org/.*", chars + `: a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components; write "ghcr.io/org/**"`},
		"anchored expression":      {"^nginx$", chars + `: a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components; write "nginx"`},
		// These three made the check of the suggestion call itself
		// without end: the agent died of a stack overflow instead of
		// naming the field (review agent r14 A1).
		"alternation":             {"(nginx|redis)", chars + `: a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components`},
		"alternation in the path": {"ghcr.io/org/(app|web)", chars + `: a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components`},
		"regular expression plus": {"ghcr.io/org/app+", chars + `: a pattern is a glob, not a regular expression: * is any run of characters within a path component, ** any number of components`},
		// Valid, but the repository appd (review agent r14 A2).
		"digit class":             {`ghcr.io/org/app\d`, `has \d, which in a regular expression is a class of characters; in a pattern a backslash escapes the next character, so it is the letter "d" alone: write "[0-9]" for a digit, or "*" for any characters`},
		"brace expansion":         {"ghcr.io/org/app:{v1,v2}", never + `a tag is letters, digits, "_", "." and "-", and does not start with "." or "-": write one pattern per list item ("ghcr.io/org/app:v1", "ghcr.io/org/app:v2")`},
		"no repository":           {"@sha256:" + hex64, never + `no repository name: write "**@sha256:` + hex64 + `" for any repository`},
		"no repository, tag":      {":v1", never + `no repository name: write "**:v1" for any repository`},
		"bare image ID":           {hex64, never + `a name of 64 hexadecimal digits is an image ID: write "sha256:` + hex64 + `"`},
		"scheme":                  {"https://registry.example/team/app:v1", never + `a reference has no scheme: write "registry.example/team/app:v1"`},
		"empty component":         {"registry.example//app", never + `empty path component (a leading, trailing or double "/")`},
		"tag too long":            {"nginx:" + strings.Repeat("a", 129), never + "a tag has at most 128 characters"},
		"tag starting with a dot": {"nginx:.hidden", never + `a tag is letters, digits, "_", "." and "-", and does not start with "." or "-"`},
		"short image ID":          {"5e1ce4d7a8c9", `is a Docker Hub name of hexadecimal digits (docker.io/library/5e1ce4d7a8c9), which looks like a short image ID as crictl images shows it: an image ID pattern is "sha256:5e1ce4d7a8c9*"`},
		"short image ID, 13":      {"5e1ce4d7a8c9b", `is a Docker Hub name of hexadecimal digits (docker.io/library/5e1ce4d7a8c9b), which looks like a short image ID as crictl images shows it: an image ID pattern is "sha256:5e1ce4d7a8c9b*"`},
	} {
		t.Run(name, func(t *testing.T) { checkExcludeRefused(t, tc.pattern, tc.want) })
	}
}

// TestExcludeSyntaxErrors: a pattern that is not valid glob syntax in one of
// its parts is a validation error naming the field, and no warning.
func TestExcludeSyntaxErrors(t *testing.T) {
	for name, pattern := range map[string]string{
		"open class":               "registry.example/app-[ab",
		"open class in the tag":    "nginx:v[0-9",
		"class split by a colon":   "nginx[:]",
		"trailing escape":          `nginx:v1\`,
		"empty":                    "",
		"only spaces":              "  ",
		"class split by a slash":   "registry.example/a[/]b",
		"open class in the digest": "nginx@sha256:[ab",
		"IPv6 registry unescaped":  "[::1]:5000/app",
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(header + "imageGC:\n  exclude:\n  - ok/*\n  - " + strconv.Quote(pattern) + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			errs := Validate(loaded.Config)
			if len(errs) != 1 || errs[0].Field != "imageGC.exclude[1]" || !strings.HasPrefix(errs[0].Error(), "imageGC.exclude[1]: Invalid value: ") {
				t.Errorf("Validate() = %v, want one imageGC.exclude[1]: Invalid value", errs)
			}
			if len(loaded.Warnings) > 0 {
				t.Errorf("warnings %q for a pattern that is an error", loaded.Warnings)
			}
		})
	}
}

// TestValidateRefusesBareRegistryHost: a pattern of one component that is
// plainly a registry host (a ".", or localhost, with or without a port) is
// read by the reference library as a Docker Hub official image
// (registry.k8s.io is docker.io/library/registry.k8s.io, localhost:5000 the
// image localhost with the tag 5000) and protected nothing, with no warning.
// Now it is refused, with what to write for every image of that registry.
func TestValidateRefusesBareRegistryHost(t *testing.T) {
	const host = "is a registry host alone, which a reference reads as the Docker Hub image %s: write %q for every image of that registry"
	for pattern, want := range map[string]string{
		"registry.k8s.io":       fmt.Sprintf(host, "docker.io/library/registry.k8s.io", "registry.k8s.io/**"),
		"quay.io":               fmt.Sprintf(host, "docker.io/library/quay.io", "quay.io/**"),
		"docker.io":             fmt.Sprintf(host, "docker.io/library/docker.io", "docker.io/**"),
		"localhost":             fmt.Sprintf(host, "docker.io/library/localhost", "localhost/**"),
		"localhost:5000":        fmt.Sprintf(host, "docker.io/library/localhost:5000", "localhost:5000/**"),
		"registry.example:5000": fmt.Sprintf(host, "docker.io/library/registry.example:5000", "registry.example:5000/**"),
		"123456789012.dkr.ecr.us-east-1.amazonaws.com": fmt.Sprintf(host, "docker.io/library/123456789012.dkr.ecr.us-east-1.amazonaws.com",
			"123456789012.dkr.ecr.us-east-1.amazonaws.com/**"),
		"Registry.K8s.io": fmt.Sprintf(host, "docker.io/library/Registry.K8s.io", "Registry.K8s.io/**"),
		"*.k8s.io":        fmt.Sprintf(host, "docker.io/library/*.k8s.io", "*.k8s.io/**"),
		"quay.io:latest":  fmt.Sprintf(host, "docker.io/library/quay.io:latest", "quay.io/**:latest"),
	} {
		t.Run(pattern, func(t *testing.T) { checkExcludeRefused(t, pattern, want) })
	}
}

// TestValidateRefusesWildcardFirstOneComponent: a name of one component
// that starts with a wildcard ("*nginx*", "*-agent:*", "*") is read as a
// Docker Hub official image, as every name of one component is: it matches
// neither bitnami/nginx nor registry.k8s.io/ingress-nginx/controller.
// Before, "*" alone was a warning and the others were silent; now each is
// refused, with what to write for either meaning.
func TestValidateRefusesWildcardFirstOneComponent(t *testing.T) {
	const hub = "is a name of one component, so it matches Docker Hub's official images only (%s): write %q for any registry, or %q to mean official images only"
	for pattern, want := range map[string]string{
		"*nginx*":   fmt.Sprintf(hub, "docker.io/library/*nginx*", "**/*nginx*", "docker.io/library/*nginx*"),
		"*-agent:*": fmt.Sprintf(hub, "docker.io/library/*-agent:*", "**/*-agent:*", "docker.io/library/*-agent:*"),
		"*":         fmt.Sprintf(hub, "docker.io/library/*", "**", "docker.io/library/*"),
		"*:*":       fmt.Sprintf(hub, "docker.io/library/*:*", "**:*", "docker.io/library/*:*"),
		"?ginx":     fmt.Sprintf(hub, "docker.io/library/?ginx", "**/?ginx", "docker.io/library/?ginx"),
		"[a-z]*":    fmt.Sprintf(hub, "docker.io/library/[a-z]*", "**/[a-z]*", "docker.io/library/[a-z]*"),
	} {
		t.Run(pattern, func(t *testing.T) { checkExcludeRefused(t, pattern, want) })
	}
}

// TestValidateRefusesRegexpDotStar: ".*" in a repository path is a
// regular expression's "any characters" written in a glob, where "." is a
// dot: "ghcr.io/org/app.*" matched app.v2 but not app or app-v2, and was
// accepted; "nginx.*" was refused as a registry host alone, the wrong
// reason. Each is now refused with both readings' patterns.
func TestValidateRefusesRegexpDotStar(t *testing.T) {
	const dotStar = `has ".*", which in a regular expression is any characters; in a pattern "." is a dot and "*" alone is any characters, ` +
		`so it matches only names with a dot there: write %q for any characters, or %q to mean the dot`
	for pattern, want := range map[string]string{
		"nginx.*":                       fmt.Sprintf(dotStar, "nginx*", "nginx[.]*"),
		"nginx.*:latest":                fmt.Sprintf(dotStar, "nginx*:latest", "nginx[.]*:latest"),
		"ghcr.io/org/app.*":             fmt.Sprintf(dotStar, "ghcr.io/org/app*", "ghcr.io/org/app[.]*"),
		"bitnami/redis.*":               fmt.Sprintf(dotStar, "bitnami/redis*", "bitnami/redis[.]*"),
		"ghcr.io/org/app.*-worker":      fmt.Sprintf(dotStar, "ghcr.io/org/app*-worker", "ghcr.io/org/app[.]*-worker"),
		"registry.*/org.*/app@sha256:*": fmt.Sprintf(dotStar, "registry.*/org*/app@sha256:*", "registry.*/org[.]*/app@sha256:*"),
		"ghcr.io/org/app[.*]-v.*":       fmt.Sprintf(dotStar, "ghcr.io/org/app[.*]-v*", "ghcr.io/org/app[.*]-v[.]*"),
	} {
		t.Run(pattern, func(t *testing.T) { checkExcludeRefused(t, pattern, want) })
	}
}
