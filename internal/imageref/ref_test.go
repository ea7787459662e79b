package imageref

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestForms: references as pod specs and pod statuses write them.
func TestForms(t *testing.T) {
	const hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string][]string{
		"nginx":                                 {"docker.io/library/nginx:latest"},
		"nginx:1.27":                            {"docker.io/library/nginx:1.27"},
		"docker.io/nginx:1.27":                  {"docker.io/library/nginx:1.27"},
		"index.docker.io/nginx":                 {"docker.io/library/nginx:latest"},
		"team/app:v1":                           {"docker.io/team/app:v1"},
		"127.0.0.1:5000/team/app":               {"127.0.0.1:5000/team/app:latest"},
		"localhost/app:v1":                      {"localhost/app:v1"},
		"registry.k8s.io/pause:3.10":            {"registry.k8s.io/pause:3.10"},
		"nginx@sha256:" + hex:                   {"docker.io/library/nginx@sha256:" + hex},
		"nginx:1.27@sha256:" + hex:              {"docker.io/library/nginx:1.27", "docker.io/library/nginx@sha256:" + hex},
		"docker-pullable://nginx@sha256:" + hex: {"docker.io/library/nginx@sha256:" + hex},
		"sha256:" + hex:                         {"sha256:" + hex},
		hex:                                     {"sha256:" + hex},
		" nginx ":                               {"docker.io/library/nginx:latest"},
		"Nginx":                                 nil, // upper case: not a valid repository
		"":                                      nil,
		"nginx:bad tag":                         nil,
	}
	for ref, want := range cases {
		if diff := cmp.Diff(want, Forms(ref)); diff != "" {
			t.Errorf("Forms(%q) (-want +got):\n%s", ref, diff)
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/library/nginx:latest": "docker.io/library/nginx:latest",
		"nginx:1":                        "docker.io/library/nginx:1",
		"quay.io/a/b@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": "quay.io/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"not a name": "not a name",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestShortForms: a reference without a registry gives its forms without
// one, as written (CRI-O lists it under the registry it resolved it to);
// one with a registry, or an image ID, gives none.
func TestShortForms(t *testing.T) {
	shortHex := strings.Repeat("ab", 32)
	for ref, want := range map[string][]string{
		"nginx":                          {"nginx:latest"},
		"nginx:1.27":                     {"nginx:1.27"},
		"library/nginx":                  {"library/nginx:latest"},
		"ubi8/ubi-minimal:8.9":           {"ubi8/ubi-minimal:8.9"},
		"team/app:v2@sha256:" + shortHex: {"team/app:v2", "team/app@sha256:" + shortHex},
		"docker.io/library/nginx":        nil,
		"quay.io/team/app":               nil,
		"localhost/app":                  nil,
		"127.0.0.1:5000/app":             nil,
		"sha256:" + shortHex:             nil,
	} {
		if got := ShortForms(ref); !slices.Equal(got, want) {
			t.Errorf("ShortForms(%q) = %q, want %q", ref, got, want)
		}
	}
	if got := WithoutRegistry("registry.access.redhat.com/ubi8/ubi-minimal:8.9"); got != "ubi8/ubi-minimal:8.9" {
		t.Errorf("WithoutRegistry = %q", got)
	}
}
