package images

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodegc/nodegc/pkg/config"
)

// Digests of the exclusion tests: an image ID (config digest) and a
// manifest digest, as CRI reports them.
var (
	testID     = "sha256:" + strings.Repeat("0123abcd", 8)
	testDigest = "sha256:" + strings.Repeat("fedc9876", 8)
)

// TestExcludedAsOperatorsWriteThem: exclusion patterns are written the way
// operators write image references (familiar or fully qualified, with or
// without a tag), while CRI reports fully qualified names; both sides are
// normalised before matching. Each case is one pattern against an image
// with one name: a tag (repository:tag), a digest (repository@digest, put
// in RepoDigests), or no name at all (matched by its ID only).
func TestExcludedAsOperatorsWriteThem(t *testing.T) {
	for name, tc := range map[string]struct {
		pattern, image string
		want           bool
	}{
		// Familiar and fully qualified forms are the same image.
		"familiar pattern, qualified tag":        {"nginx:*", "docker.io/library/nginx:1.25", true},
		"library pattern, qualified tag":         {"library/nginx:*", "docker.io/library/nginx:1.25", true},
		"qualified pattern, qualified tag":       {"docker.io/library/nginx:*", "docker.io/library/nginx:1.25", true},
		"short hub pattern, qualified tag":       {"docker.io/nginx:1.25", "docker.io/library/nginx:1.25", true},
		"legacy hub domain":                      {"index.docker.io/library/nginx:1.25", "docker.io/library/nginx:1.25", true},
		"qualified pattern, familiar tag":        {"docker.io/library/nginx:*", "nginx:1.25", true},
		"hub user repository":                    {"team/app:v1", "docker.io/team/app:v1", true},
		"familiar pattern, other registry":       {"nginx:*", "quay.io/library/nginx:1.25", false},
		"registry pattern, that registry":        {"registry.example/team/app:*", "registry.example/team/app:1", true},
		"registry pattern, hub image":            {"registry.example/team/app:*", "docker.io/team/app:1", false},
		"registry with a port":                   {"127.0.0.1:5000/team/app:v1", "127.0.0.1:5000/team/app:v1", true},
		"registry with another port":             {"127.0.0.1:5000/team/app:*", "127.0.0.1:5001/team/app:v1", false},
		"wildcard port":                          {"127.0.0.1:*/team/app:v1", "127.0.0.1:5000/team/app:v1", true},
		"localhost registry":                     {"localhost:5000/app:*", "localhost:5000/app:v1", true},
		"wildcard registry":                      {"*.example/team/app:*", "registry.example/team/app:1", true},
		"wildcard first component is a hub name": {"*/critical-agent:*", "docker.io/library/critical-agent:1", true},
		"wildcard first component, a registry":   {"*/critical-agent:*", "registry.example/critical-agent:1", true},
		"wildcard first component, deeper":       {"*/critical-agent:*", "registry.example/team/critical-agent:1", false},

		// Globs within a component, as in path.Match.
		"star does not cross a slash": {"registry.example/*:*", "registry.example/team/app:1", false},
		"star in a component":         {"registry.example/*/app:*", "registry.example/team/app:1", true},
		"question mark":               {"registry.example/team/app:v?", "registry.example/team/app:v1", true},
		"question mark is one char":   {"registry.example/team/app:v?", "registry.example/team/app:v10", false},
		"class":                       {"registry.example/team/app-[ab]:*", "registry.example/team/app-b:1", true},
		"class excludes":              {"registry.example/team/app-[ab]:*", "registry.example/team/app-c:1", false},

		// ** as a whole component: any number of components, none included.
		"double star first, hub":         {"**/critical-agent:*", "docker.io/library/critical-agent:1", true},
		"double star first, registry":    {"**/critical-agent:*", "registry.example/team/critical-agent:1", true},
		"double star first, other name":  {"**/critical-agent:*", "registry.example/team/critical-agent-2:1", false},
		"double star middle, none":       {"registry.example/**/app:*", "registry.example/app:1", true},
		"double star middle, several":    {"registry.example/**/app:*", "registry.example/a/b/app:1", true},
		"double star middle, other host": {"registry.example/**/app:*", "other.example/a/app:1", false},
		"double star last":               {"registry.example/team/**", "registry.example/team/x/y:1", true},
		"double star alone":              {"**", "quay.io/any/thing:1", true},
		"hub, double star: a user's":     {"docker.io/**", "docker.io/bitnami/redis:7", true},
		"hub, double star: official":     {"docker.io/**", "docker.io/library/redis:7", true},
		"hub, double star: familiar":     {"docker.io/**", "bitnami/redis:7", true},
		"hub, double star: elsewhere":    {"docker.io/**", "quay.io/bitnami/redis:7", false},
		"legacy hub, double star":        {"index.docker.io/**:*", "docker.io/bitnami/redis:7", true},
		"double star with a tag":         {"**:v1", "quay.io/any/thing:v1", true},
		"double star, other tag":         {"**:v1", "quay.io/any/thing:v2", false},

		// Tags and digests.
		"no tag: every tag":              {"nginx", "docker.io/library/nginx:1.25", true},
		"no tag: every digest":           {"nginx", "docker.io/library/nginx@" + testDigest, true},
		"no tag: not a longer name":      {"nginx", "docker.io/library/nginx-extra:1", false},
		"latest is not implied":          {"nginx:latest", "docker.io/library/nginx:1.25", false},
		"tag pattern, digest-only image": {"nginx:*", "docker.io/library/nginx@" + testDigest, false},
		"digest":                         {"nginx@" + testDigest, "docker.io/library/nginx@" + testDigest, true},
		"digest glob":                    {"registry.example/team/app@sha256:*", "registry.example/team/app@" + testDigest, true},
		"digest in any repository":       {"**@" + testDigest, "registry.example/team/app@" + testDigest, true},
		"other digest":                   {"nginx@sha256:" + strings.Repeat("0", 64), "docker.io/library/nginx@" + testDigest, false},
		"tag and digest: digest decides": {"nginx:1.25@" + testDigest, "docker.io/library/nginx@" + testDigest, true},

		// Image IDs.
		"image ID":        {testID, "", true},
		"image ID prefix": {"sha256:0123abcd*", "", true},
		"a digest matches a repository digest too": {testDigest, "docker.io/library/nginx@" + testDigest, true}, // kubectl's imageID
		"name pattern does not hit ID":             {"*", "", false},
	} {
		t.Run(name, func(t *testing.T) {
			p := policyFor(t, func(c *config.ImageGCConfiguration) { c.Exclude = []string{tc.pattern} })
			img := &Image{ID: testID, FirstDetected: t0.Add(-time.Hour)}
			switch {
			case strings.Contains(tc.image, "@"):
				img.RepoDigests = []string{tc.image}
			case tc.image != "":
				img.RepoTags = []string{tc.image}
			}
			if got := p.excluded(img); got != tc.want {
				t.Errorf("exclude %q, image %q: excluded = %v, want %v", tc.pattern, tc.image, got, tc.want)
			}
		})
	}
}

// BenchmarkPlanWithExclusions: the pure Plan on 10,000 images, each with a
// tag and a digest as in BenchmarkPlan, without exclusions and with five;
// the difference is what matching exclusions costs at each plan.
func BenchmarkPlanWithExclusions(b *testing.B) {
	imgs := make([]Image, 10000)
	for i := range imgs {
		imgs[i] = Image{
			ID:            fmt.Sprintf("sha256:%064d", i),
			RepoTags:      []string{fmt.Sprintf("registry.example.com/team%d/app%d:v%d", i%50, i%700, i)},
			RepoDigests:   []string{fmt.Sprintf("registry.example.com/team%d/app%d@sha256:%064d", i%50, i%700, i)},
			Size:          mib,
			FirstDetected: t0.Add(-time.Hour),
		}
	}
	disk := DiskStats{Capacity: 2000 << 30, Available: 100 << 30}
	for _, bc := range []struct {
		name    string
		exclude []string
	}{
		{"none", nil},
		{"five", []string{"registry.example.com/team1/*:*", "**/critical-agent:*", "nginx", "registry.k8s.io/pause", "sha256:00000000000000000000000000000000000000000000000000000000000001*"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := policyConfig()
			c.Exclude = bc.exclude
			p := NewPolicy(c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Plan(imgs, disk, t0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
