package ownergc

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Every write but a delete is an RFC 6902 JSON patch guarded by "test"
// operations: on the object's UID, on the resourceVersion the decision was
// made on (when given), and on the UID or name at each index touched. The
// API server applies a JSON patch atomically and rejects it (422) when a test
// fails, so a patch built from a stale cache can never change the wrong
// reference or the wrong object. JSON patch works for built-in types and
// custom resources alike (a strategic merge patch does not work on CRDs).

// patchFailedMessage is kube-apiserver's message when it cannot apply a
// JSON patch to the object as it is (a test operation that fails, a path
// that is not there).
const patchFailedMessage = "the server rejected our request due to an error in our request"

// patchTestFailed reports whether err is kube-apiserver's answer to a JSON
// patch it could not apply: 422 Invalid with patchFailedMessage and no
// details (the patch library's own words, such as "testing value
// /metadata/uid failed", are not sent). The collector's patches test the
// UID, and what they change, before they change it, so this answer means
// that the object is not the one the decision saw. A 422 that denies the
// write names the object and says who denied it: an admission policy
// (configmaps "x" is forbidden: ValidatingAdmissionPolicy 'p' ... denied
// request), a webhook (admission webhook "w" denied the request), a
// validation rule (Widget.example.com "x" is invalid). So does the 422
// that client-go makes up for an answer it cannot decode.
func patchTestFailed(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	s := status.Status()
	d := s.Details
	return s.Code == http.StatusUnprocessableEntity && s.Reason == metav1.StatusReasonInvalid && s.Message == patchFailedMessage &&
		(d == nil || (d.Name == "" && d.Group == "" && d.Kind == "" && d.UID == "" && len(d.Causes) == 0))
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// indexedUID is an owner reference at a position of metadata.ownerReferences.
type indexedUID struct {
	index int
	uid   types.UID
}

func guards(uid types.UID, rv string) []patchOp {
	ops := []patchOp{{Op: "test", Path: "/metadata/uid", Value: string(uid)}}
	if rv != "" {
		ops = append(ops, patchOp{Op: "test", Path: "/metadata/resourceVersion", Value: rv})
	}
	return ops
}

func refPath(i int) string { return "/metadata/ownerReferences/" + strconv.Itoa(i) }

// removeRefsPatch removes the owner references at the given positions
// (checking each one's UID), highest index first so that the indexes of the
// remaining operations stay valid.
func removeRefsPatch(uid types.UID, rv string, refs []indexedUID) ([]byte, error) {
	refs = slices.Clone(refs)
	slices.SortFunc(refs, func(a, b indexedUID) int { return b.index - a.index })
	refs = slices.CompactFunc(refs, func(a, b indexedUID) bool { return a.index == b.index })
	ops := guards(uid, rv)
	for _, r := range refs {
		ops = append(ops,
			patchOp{Op: "test", Path: refPath(r.index) + "/uid", Value: string(r.uid)},
			patchOp{Op: "remove", Path: refPath(r.index)})
	}
	return json.Marshal(ops)
}

// unblockRefsPatch sets blockOwnerDeletion=false on the owner references at
// the given positions (checking each one's UID).
func unblockRefsPatch(uid types.UID, rv string, refs []indexedUID) ([]byte, error) {
	ops := guards(uid, rv)
	for _, r := range refs {
		ops = append(ops,
			patchOp{Op: "test", Path: refPath(r.index) + "/uid", Value: string(r.uid)},
			patchOp{Op: "replace", Path: refPath(r.index) + "/blockOwnerDeletion", Value: false})
	}
	return json.Marshal(ops)
}

// removeFinalizerPatch removes finalizer name at position index.
func removeFinalizerPatch(uid types.UID, rv string, index int, name string) ([]byte, error) {
	p := "/metadata/finalizers/" + strconv.Itoa(index)
	ops := append(guards(uid, rv),
		patchOp{Op: "test", Path: p, Value: name},
		patchOp{Op: "remove", Path: p})
	return json.Marshal(ops)
}

func indexedUIDs(refs []ownerView) []indexedUID {
	out := make([]indexedUID, 0, len(refs))
	for _, r := range refs {
		out = append(out, indexedUID{index: r.index, uid: r.uid})
	}
	return out
}
