package config

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExcludeWarnings: an exclusion pattern that can never match a valid
// image reference, or that means something else than it seems to, is a
// warning of the loader naming the field, its line and why; a valid
// pattern is silent. The agent still starts.
func TestExcludeWarnings(t *testing.T) {
	const never = "can never match an image reference: "
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
		"upper case in the path":   {pattern: "registry.example/Team/app:*", want: never + "upper case in the repository path (references are lowercase)"},
		"upper case familiar":      {pattern: "Nginx:1.25", want: never + "upper case in the repository path (references are lowercase)"},
		"scheme":                   {pattern: "https://registry.example/team/app:v1", want: never + `a reference has no scheme (remove "https://")`},
		"space":                    {pattern: "my app:*", want: never + `the repository name holds characters a reference cannot (a registry is a host name with an optional port; a path component is lowercase letters and digits separated by ".", "_", "__" or "-")`},
		"spaces around":            {pattern: " nginx:1.25\t", want: `has white space around it, which no reference holds: matched as "nginx:1.25"`},
		"empty component":          {pattern: "registry.example//app", want: never + `empty path component (a leading, trailing or double "/")`},
		"tag too long":             {pattern: "nginx:" + strings.Repeat("a", 129), want: never + "a tag has at most 128 characters"},
		"tag starting with a dot":  {pattern: "nginx:.hidden", want: never + `a tag is letters, digits, "_", "." and "-", and does not start with "." or "-"`},
		"digest in upper case":     {pattern: "nginx@sha256:ABC*", want: never + "a digest is an algorithm and lowercase hexadecimal digits, such as sha256:<64 hex digits>"},
		"image ID in upper case":   {pattern: "sha256:ABCD*", want: never + "a digest is an algorithm and lowercase hexadecimal digits, such as sha256:<64 hex digits>"},
		"bare image ID":            {pattern: strings.Repeat("ab", 32), want: never + "a name of 64 hexadecimal digits is an image ID: write sha256:<ID>"},
		"no repository":            {pattern: "@sha256:" + strings.Repeat("ab", 32), want: never + "no repository name (write ** for any repository)"},
		"double star in a component": {
			pattern: "registry.example/team**/app",
			want:    `has "**" inside a path component, where it is the same as "*": "**" spans path components only as a whole component, as in registry.example/**/app`,
		},
		"wildcard first component": {pattern: "*/critical-agent:*"},
		"star alone": {
			pattern: "*",
			want:    "is a name of one component, so it matches Docker Hub's official images only (docker.io/library/*): write ** for any repository, or docker.io/library/* for this meaning",
		},
		"star alone with a tag": {
			pattern: "*:*",
			want:    "is a name of one component, so it matches Docker Hub's official images only (docker.io/library/*:*): write **:* for any repository, or docker.io/library/*:* for this meaning",
		},
	} {
		t.Run(name, func(t *testing.T) {
			loaded, err := Decode([]byte(header + "imageGC:\n  exclude:\n  - ok/*\n  - " + strconv.Quote(tc.pattern) + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if errs := Validate(loaded.Config); len(errs) > 0 {
				t.Fatalf("Validate() = %v; a pattern that cannot match is a warning, not an error", errs)
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
