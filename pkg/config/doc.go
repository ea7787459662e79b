// Package config holds nodegc's one configuration surface: the
// NodeGCConfiguration type (apiVersion nodegc.io/v1alpha1), its strict
// decoding, its defaults and its validation.
//
// A configuration file is YAML with one or two documents: a
// NodeGCConfiguration and, optionally, a KubeletConfiguration
// (kubelet.config.k8s.io/v1beta1) whose image GC thresholds and ages,
// runtime endpoints and podLogsDir nodegc honours, so that nodegc can be
// pointed at a node's own kubelet config.
//
// Precedence, for a field both documents can set: the NodeGCConfiguration
// wins, then the KubeletConfiguration, then nodegc's default. A field counts
// as set when its key appears in the document, whatever its value.
//
// Decoding is strict: an unknown field, a value of the wrong type or a
// duplicate key is an error naming the field path and its line. Unknown
// fields of the KubeletConfiguration are warnings instead, because a node's
// kubelet may be newer than the kubelet API types nodegc was built with;
// except one named as a top-level field of the NodeGCConfiguration (a
// section of nodegc's in the wrong document), an error that names the
// document it belongs in.
// An imageGC.exclude pattern that can never match an image reference is a
// warning too (see internal/imageref), with its field path and line.
//
// Validate reports every problem at once as a field.ErrorList with field
// paths such as imageGC.lowThresholdPercent; Loaded.Problems turns it into
// "line N: ..." lines in line order. Validate is the one validator, and
// Decode does not call it on a file that decodes: its caller does. Its
// per-section forms (ValidateImageGC, ValidateContainerGC, ValidateOwnerGC)
// are what the collectors' constructors call, so a program embedding one
// gets the same rules and messages; the collectors' policies then trust the
// section and re-check nothing. This package is the first step of every
// collector's flow: config → policy → plan → execute (docs/architecture.md).
//
// A file that does not decode whole still gets every problem reported at
// once: Decode's *DecodeError lists what failed to decode and, when the
// NodeGCConfiguration document was found, what Validate says of the fields
// that did decode (defaulted, and merged with the KubeletConfiguration
// document when that one decoded without problems), sorted by line. A
// validation problem about a field that failed to decode is left out (the
// field holds its default, not the file's value): its path is, or is under,
// the failed field's, or it is a rule between fields of one struct whose
// message names the failed field. Unknown fields hide nothing.
//
// Nothing in this package performs I/O except LoadFile.
package config
