package imageref

import (
	"strings"

	"github.com/distribution/reference"
	godigest "github.com/opencontainers/go-digest"
)

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
