// Package registry runs an in-process OCI registry on 127.0.0.1 and builds
// and pushes the images the test bed's containers run.
//
// Every image has the same first layer, holding the static testbin program
// (see internal/testbed/testbin) at /testbin, which is also the default
// entrypoint (`/testbin sleep`); it is gzip-compressed about 2:1. After it
// come padding layers of chosen sizes filled with incompressible
// pseudo-random bytes, stored in gzip without compression, so their blobs
// are a few bytes larger than their tars. A padding layer is named by
// a LayerSpec (seed and size): the same spec always gives the same bytes and
// so the same digest, which is how several images share a base layer. Layers
// shared at the same position of the stack (the same prefix of layers below
// them) also share their unpacked snapshot in containerd; layers shared at
// different positions share only their blob in the content store.
//
// Image references look like 127.0.0.1:PORT/REPO:TAG and are pulled by
// containerd over plain HTTP without any registry configuration. The image
// ID that CRI reports is Image.ConfigDigest.
//
// A Registry is safe for concurrent use. Built layers are kept in memory for
// the registry's lifetime; Push hands their bytes to the registry's blob
// store in-process instead of uploading them (only the manifest goes over
// HTTP), so a test that pushes N bytes of layers holds about N bytes of
// memory, and a push costs the build alone. Building a layer runs at about
// 100 MB/s under -race (600 MB/s without).
package registry
