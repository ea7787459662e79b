package ownergc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// DebugGraphPath is where DebugHandler serves the dependency graph, as
// kube-controller-manager does. Query: uid (repeatable) selects the
// connected subgraph of those objects; format=json (or Accept:
// application/json) returns JSON instead of Graphviz DOT.
const DebugGraphPath = "/debug/controllers/garbagecollector/graph"

// ExplainPath is where the debug handler explains one object as JSON
// (Explanation; ExplainError with 4xx or 5xx). Query: resource (as kubectl
// takes it: "deployment", "deployments.apps", "cm"), namespace, name.
const ExplainPath = "/debug/ownergc/explain"

// ExplainError is the JSON body of an explain request that failed.
type ExplainError struct {
	// Leader is false when this instance does not run the owner GC.
	Leader bool `json:"leader"`
	// LeaderIdentity names the instance that holds the lease, when known.
	LeaderIdentity string `json:"leaderIdentity,omitempty"`
	Message        string `json:"message"`
}

type debugHandler struct {
	c *Collector
	// leader returns the identity of the instance that leads, "" when
	// unknown, and whether that is this instance; nil: unknown.
	leader func() (identity string, self bool)
}

// ExplainHandler is DebugHandler, with leader naming the instance that
// holds the lease in the answer of an instance that does not run the
// owner GC, and saying whether that is this instance.
func (c *Collector) ExplainHandler(leader func() (identity string, self bool)) http.Handler {
	return &debugHandler{c: c, leader: leader}
}

func (h *debugHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	switch req.URL.Path {
	case DebugGraphPath:
		h.serveGraph(w, req)
	case ExplainPath:
		h.serveExplain(w, req)
	default:
		http.NotFound(w, req)
	}
}

func (h *debugHandler) serveExplain(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	e, err := h.c.Explain(req.Context(), ExplainQuery{Resource: q.Get("resource"), Namespace: q.Get("namespace"), Name: q.Get("name")})
	if err == nil {
		writeJSON(w, http.StatusOK, e)
		return
	}
	body := ExplainError{Leader: true, Message: err.Error()}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotRunning):
		status, body.Leader = http.StatusServiceUnavailable, false
		var self bool
		if h.leader != nil {
			body.LeaderIdentity, self = h.leader()
		}
		switch {
		case self:
			// Never send the caller back to this instance.
			body.LeaderIdentity = ""
			body.Message += " (it was last heard of as the leader: its lease renewals are failing, or the lease just passed to another instance)"
		case body.LeaderIdentity != "":
			body.Message += " (it is not the leader); the leader is " + body.LeaderIdentity
		default:
			body.Message += " (it is not the leader)"
		}
	case errors.Is(err, ErrNotSynced):
		status = http.StatusServiceUnavailable
	case errors.Is(err, ErrInvalidQuery):
		status = http.StatusBadRequest
	case errors.Is(err, ErrUnknownResource):
		status = http.StatusNotFound
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func (h *debugHandler) serveGraph(w http.ResponseWriter, req *http.Request) {
	g := newGraph()
	if r := h.c.current.Load(); r != nil {
		g = r.graph
	}
	var uids []types.UID
	for _, u := range req.URL.Query()["uid"] {
		uids = append(uids, types.UID(u))
	}
	d := g.dump(uids)
	var buf bytes.Buffer
	if wantsJSON(req) {
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
	} else {
		d.writeDOT(&buf)
		w.Header().Set("Content-Type", "text/vnd.graphviz")
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(buf.Bytes())
}

func wantsJSON(req *http.Request) bool {
	if f := req.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	for _, part := range strings.Split(req.Header.Get("Accept"), ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == "application/json" {
			return true
		}
	}
	return false
}

// graphDump is a copy of (part of) the graph for the debug handler.
type graphDump struct {
	Nodes []dumpNode `json:"nodes"`
	Edges []dumpEdge `json:"edges"`
}

type dumpNode struct {
	UID                types.UID `json:"uid"`
	APIVersion         string    `json:"apiVersion"`
	Kind               string    `json:"kind"`
	Namespace          string    `json:"namespace,omitempty"`
	Name               string    `json:"name"`
	State              string    `json:"state"` // observed, virtual, deleted
	AbsentVerified     bool      `json:"absentVerified,omitempty"`
	BeingDeleted       bool      `json:"beingDeleted"`
	DeletingDependents bool      `json:"deletingDependents"`
	Dependents         int       `json:"dependents"`
}

// dumpEdge points from a dependent to its owner, as upstream draws it.
type dumpEdge struct {
	From               types.UID `json:"from"`
	To                 types.UID `json:"to"`
	BlockOwnerDeletion bool      `json:"blockOwnerDeletion"`
	Controller         bool      `json:"controller"`
}

// dump copies the nodes that have owners or dependents, or with uids the
// subgraph connected to those objects (through owners and dependents).
func (g *graph) dump(uids []types.UID) graphDump {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var selected []*node
	if len(uids) == 0 {
		for _, n := range g.nodes {
			if len(n.owners) > 0 || len(n.dependents) > 0 {
				selected = append(selected, n)
			}
		}
	} else {
		seen := map[*node]bool{}
		var todo []*node
		for _, u := range uids {
			if n, ok := g.nodes[u]; ok && !seen[n] {
				seen[n] = true
				todo = append(todo, n)
			}
		}
		for len(todo) > 0 {
			n := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			selected = append(selected, n)
			visit := func(m *node) {
				if !seen[m] {
					seen[m] = true
					todo = append(todo, m)
				}
			}
			for i := range n.owners {
				visit(n.owners[i].owner)
			}
			for dep := range n.dependents {
				visit(dep)
			}
		}
	}
	d := graphDump{Nodes: []dumpNode{}, Edges: []dumpEdge{}}
	for _, n := range selected {
		state := "virtual"
		switch {
		case n.observed():
			state = "observed"
		case n.deleted():
			state = "deleted"
		}
		d.Nodes = append(d.Nodes, dumpNode{
			UID: n.uid, APIVersion: n.kind.apiVersion, Kind: n.kind.kind, Namespace: n.namespace, Name: n.name,
			State: state, AbsentVerified: n.flags&flagAbsentAtIdentity != 0,
			BeingDeleted: n.beingDeleted(), DeletingDependents: n.deletingDependents(), Dependents: len(n.dependents),
		})
		for i := range n.owners {
			l := &n.owners[i]
			d.Edges = append(d.Edges, dumpEdge{From: n.uid, To: l.owner.uid, BlockOwnerDeletion: l.blocks(),
				Controller: l.flags&refController != 0})
		}
	}
	slices.SortFunc(d.Nodes, func(a, b dumpNode) int { return strings.Compare(string(a.UID), string(b.UID)) })
	slices.SortFunc(d.Edges, func(a, b dumpEdge) int {
		if c := strings.Compare(string(a.From), string(b.From)); c != 0 {
			return c
		}
		return strings.Compare(string(a.To), string(b.To))
	})
	return d
}

// writeDOT renders the dump as Graphviz DOT in upstream's layout: one
// vertex per object with its identity and state as attributes, one edge
// from each dependent to each owner.
func (d graphDump) writeDOT(w io.Writer) {
	fmt.Fprintln(w, "strict digraph full {")
	if len(d.Nodes) > 0 {
		fmt.Fprintln(w, "  // Node definitions.")
	}
	for _, n := range d.Nodes {
		group, version, _ := strings.Cut(n.APIVersion, "/")
		if version == "" {
			group, version = "", n.APIVersion
		}
		kubectl := n.Kind + "." + version
		if group != "" {
			kubectl += "." + group
		}
		var conds []string
		if n.State != "observed" {
			conds = append(conds, n.State)
		}
		if n.AbsentVerified {
			conds = append(conds, "absentVerified")
		}
		if n.BeingDeleted {
			conds = append(conds, "beingDeleted")
		}
		if n.DeletingDependents {
			conds = append(conds, "deletingDependents")
		}
		label := fmt.Sprintf("uid=%s\nnamespace=%s\n%s/%s\n", n.UID, n.Namespace, kubectl, n.Name)
		if len(conds) > 0 {
			label += strings.Join(conds, ",") + "\n"
		}
		fmt.Fprintf(w, "  %q [\n", n.UID)
		for _, a := range [][2]string{
			{"label", label}, {"group", group}, {"version", version}, {"kind", n.Kind},
			{"namespace", n.Namespace}, {"name", n.Name}, {"uid", string(n.UID)}, {"state", n.State},
			{"virtual", fmt.Sprint(n.State == "virtual")}, {"beingDeleted", fmt.Sprint(n.BeingDeleted)},
			{"deletingDependents", fmt.Sprint(n.DeletingDependents)},
		} {
			fmt.Fprintf(w, "    %s=%q\n", a[0], a[1])
		}
		fmt.Fprintln(w, "  ];")
	}
	if len(d.Edges) > 0 {
		fmt.Fprintln(w, "  // Edge definitions.")
	}
	for _, e := range d.Edges {
		fmt.Fprintf(w, "  %q -> %q [blockOwnerDeletion=%q controller=%q];\n", e.From, e.To,
			fmt.Sprint(e.BlockOwnerDeletion), fmt.Sprint(e.Controller))
	}
	fmt.Fprintln(w, "}")
}
