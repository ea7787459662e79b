// Package ownergc will hold the cluster-wide ownerReference garbage
// collector run by the elected nodegc instance: discovery and metadata-only
// monitors, a single-writer dependency graph, the attempt-to-delete and
// attempt-to-orphan workers honouring the orphan and foregroundDeletion
// finalizers and blockOwnerDeletion, and a debug handler for the graph.
//
// Nothing is implemented yet.
package ownergc
