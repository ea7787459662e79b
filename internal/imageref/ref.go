package imageref

import (
	"strings"

	"github.com/distribution/reference"
	godigest "github.com/opencontainers/go-digest"
)

// ShortForms returns, for a reference that names no registry ("nginx",
// "ubi8/ubi-minimal:8.9"), the forms Forms gives without their registry
// ("nginx:latest", "ubi8/ubi-minimal:8.9"), as written: CRI-O resolves
// such a name through its registries.conf and lists the image under the
// registry that served it, "registry.access.redhat.com/ubi8/ubi-minimal:8.9",
// which Forms (Docker Hub's reading) does not name. That covers its
// unqualified-search-registries, not a short-name alias that changes the
// path too ("centos" to quay.io/centos/centos): only the runtime can
// resolve those (ImageStatus of the name). Nil for a reference
// that names its registry, and for an image ID. WithoutRegistry of a
// listed name is what to compare them with.
func ShortForms(ref string) []string {
	ref = strings.TrimSpace(ref)
	if _, rest, ok := strings.Cut(ref, "://"); ok {
		ref = rest
	}
	first, _, hasPath := strings.Cut(ref, "/")
	if hasPath && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return nil // a registry
	}
	var out []string
	for _, f := range Forms(ref) {
		if !strings.HasPrefix(f, "docker.io/") {
			continue // an image ID
		}
		name := strings.TrimPrefix(f, "docker.io/")
		if !strings.HasPrefix(ref, "library/") { // a registry was refused above: ref names none
			name = strings.TrimPrefix(name, "library/")
		}
		out = append(out, name)
	}
	return out
}

// WithoutRegistry returns a fully qualified image name without its
// registry: "registry.access.redhat.com/ubi8/ubi-minimal:8.9" is
// "ubi8/ubi-minimal:8.9".
func WithoutRegistry(name string) string {
	if _, rest, ok := strings.Cut(name, "/"); ok {
		return rest
	}
	return name
}

// Forms returns the fully qualified forms under which a runtime lists the
// image that ref, an image reference as a pod spec or a pod's status
// (imageID) writes it, names: "NAME:TAG" (":latest" when ref has neither
// tag nor digest) and "NAME@DIGEST" when it has a digest, so
// "nginx" is "docker.io/library/nginx:latest". An image ID
// ("sha256:HEX", or HEX alone) is returned as "sha256:HEX". A scheme prefix
// of the Docker era ("docker-pullable://") is dropped. A reference that does
// not parse has no form.
func Forms(ref string) []string {
	ref = strings.TrimSpace(ref)
	if _, rest, ok := strings.Cut(ref, "://"); ok {
		ref = rest
	}
	if d, err := godigest.Parse(ref); err == nil {
		return []string{d.String()}
	}
	if isHexID(ref) {
		return []string{"sha256:" + ref}
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil
	}
	var out []string
	if t, ok := named.(reference.Tagged); ok {
		if tagged, err := reference.WithTag(reference.TrimNamed(named), t.Tag()); err == nil {
			out = append(out, tagged.String())
		}
	}
	if d, ok := named.(reference.Digested); ok {
		if digested, err := reference.WithDigest(reference.TrimNamed(named), d.Digest()); err == nil {
			out = append(out, digested.String())
		}
	}
	if len(out) == 0 {
		out = append(out, reference.TagNameOnly(named).String())
	}
	return out
}

// Normalize returns a name as a runtime lists it (a RepoTags or RepoDigests
// entry) fully qualified, or as given when it does not parse.
func Normalize(name string) string {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return name
	}
	return named.String()
}

// isHexID says whether s is an image ID without its algorithm: 64 lower
// case hex characters.
// CanonicalID returns an image ID as ALGORITHM:HEX. CRI-O lists image IDs
// as their hexadecimal digits alone; those get "sha256:" in front. Any
// other ID is returned as it is.
func CanonicalID(id string) string {
	if isHexID(id) {
		return "sha256:" + id
	}
	return id
}

func isHexID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
