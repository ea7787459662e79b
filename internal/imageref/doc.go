// Package imageref matches image names against patterns written the way
// operators write image references: "nginx:*", "registry.k8s.io/pause",
// "**/critical-agent:*", "127.0.0.1:*/team/app:v1", "sha256:0123abcd*".
// It is what imageGC.exclude means; pkg/config validates and warns with
// it, pkg/images matches with it.
//
// Both sides are normalised with github.com/distribution/reference, the
// library containerd and the kubelet use, so a familiar name and its fully
// qualified form are the same image: "nginx", "library/nginx",
// "docker.io/nginx" and "docker.io/library/nginx" all name
// docker.io/library/nginx, which is what containerd reports.
//
// A pattern is NAME[:TAG][@DIGEST], or an image ID pattern sha256:HEX.
//
//   - NAME is split into path components at "/". A component is matched as
//     by path.Match: "*" is any run of characters within the component,
//     "?" one character, "[...]" one character of a class; "*" never crosses
//     a "/". A component that is exactly "**" is any number of components,
//     zero included. A "**" inside a component is the same as "*" (a
//     warning says so).
//   - A pattern matches an image when some text for its wildcards makes a
//     reference that names the image. So the first component is the
//     registry when the reference library reads it so: it holds a "." or a
//     ":", or is "localhost". Otherwise the name is on Docker Hub:
//     "docker.io/" is put in front, and "library/" too for a name of one
//     component ("*" is docker.io/library/*, Docker Hub's official images
//     only: Misread says so of every name of one component that starts
//     with a wildcard, and of a registry host alone, "registry.k8s.io"). A first component with wildcards and no
//     literal "." or ":" may be either: "*/app" matches docker.io/team/app
//     and quay.io/app, but not quay.io/team/app ("*" is one component;
//     write "**/app" for any registry and depth). A pattern starting with
//     "**" is matched against the fully qualified name, registry included.
//   - Without TAG and DIGEST the pattern names a repository and matches all
//     its tags and digests. With TAG it matches tags only (RepoTags); with
//     DIGEST it matches digests only (RepoDigests) and a TAG beside it is
//     ignored, as containerd ignores it when pulling.
//   - A pattern sha256:..., sha384:... or sha512:... without "/" and "@" is
//     matched against the image ID (the config digest) and against the
//     digests of the image's repository digests (the manifest digest, which
//     kubectl shows as a container's imageID): a digest names one blob, so
//     it cannot be one image's ID and another's manifest.
//
// A pattern that is not valid path.Match syntax in one of its parts is an
// error. A valid one that can never match a valid image reference (upper
// case in the repository path, a scheme, characters a reference cannot
// hold, a tag longer than 128 characters, a malformed digest...) compiles,
// and NeverMatches says why and what to write; one that matches some
// reference but not what its text plainly names (a registry host alone,
// "*nginx*", a short image ID, each read as a Docker Hub official image;
// ".*" in a repository path, a regular expression's "any characters" read
// as a dot and then any characters) compiles, and Misread says so. pkg/config refuses
// both. Such a pattern is still matched, as written, against fully
// qualified names. Warnings says how a pattern is read other than as
// written (white space around it dropped, "**" inside a component).
//
// A Set is compiled once and is safe for concurrent use. It remembers the
// result for every image name it has seen (the patterns do not change), so
// that matching 10,000 images at each plan costs a map lookup per name
// instead of a reference parse.
package imageref
