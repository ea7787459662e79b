package ownergc

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestReferenceAtUnservedVersion: an owner reference at a version of its
// group that is no longer served (apps/v1beta2, on an API server serving
// apps/v1 only) maps to a version that is: every served version holds the
// same objects, so the owner is looked up there. kube-controller-manager
// maps the stated version only, retries the mapping error for good and
// never deletes such a dependent (the README lists the difference). A
// kind the group does not serve at all stays unknown.
func TestReferenceAtUnservedVersion(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Group: "apps", Version: "v1"}})
	mapper.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	snap := &discoverySnapshot{mapper: mapper}
	m, err := snap.mapping("apps/v1beta2", "Deployment")
	if err != nil || m.Resource != (schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}) {
		t.Errorf("apps/v1beta2 Deployment: %v, %v; want apps/v1 deployments", m, err)
	}
	if _, err := snap.mapping("apps/v1beta2", "Widget"); !errors.Is(err, errUnknownKind) {
		t.Errorf("apps/v1beta2 Widget: %v; want errUnknownKind", err)
	}
}
