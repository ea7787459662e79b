package ownergc

import (
	"net/http"
	"net/url"
	"testing"
)

func TestPatches(t *testing.T) {
	tests := map[string]struct {
		build func() ([]byte, error)
		want  string
	}{
		"remove references, highest index first, guarded": {
			build: func() ([]byte, error) {
				return removeRefsPatch("u1", "42", []indexedUID{{0, "a"}, {2, "c"}, {2, "c"}})
			},
			want: `[{"op":"test","path":"/metadata/uid","value":"u1"},` +
				`{"op":"test","path":"/metadata/resourceVersion","value":"42"},` +
				`{"op":"test","path":"/metadata/ownerReferences/2/uid","value":"c"},` +
				`{"op":"remove","path":"/metadata/ownerReferences/2"},` +
				`{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"a"},` +
				`{"op":"remove","path":"/metadata/ownerReferences/0"}]`,
		},
		"remove references without a resourceVersion guard": {
			build: func() ([]byte, error) { return removeRefsPatch("u1", "", []indexedUID{{1, "b"}}) },
			want: `[{"op":"test","path":"/metadata/uid","value":"u1"},` +
				`{"op":"test","path":"/metadata/ownerReferences/1/uid","value":"b"},` +
				`{"op":"remove","path":"/metadata/ownerReferences/1"}]`,
		},
		"unblock references writes false": {
			build: func() ([]byte, error) { return unblockRefsPatch("u1", "7", []indexedUID{{1, "b"}}) },
			want: `[{"op":"test","path":"/metadata/uid","value":"u1"},` +
				`{"op":"test","path":"/metadata/resourceVersion","value":"7"},` +
				`{"op":"test","path":"/metadata/ownerReferences/1/uid","value":"b"},` +
				`{"op":"replace","path":"/metadata/ownerReferences/1/blockOwnerDeletion","value":false}]`,
		},
		"remove a finalizer at its index": {
			build: func() ([]byte, error) { return removeFinalizerPatch("u1", "", 3, "foregroundDeletion") },
			want: `[{"op":"test","path":"/metadata/uid","value":"u1"},` +
				`{"op":"test","path":"/metadata/finalizers/3","value":"foregroundDeletion"},` +
				`{"op":"remove","path":"/metadata/finalizers/3"}]`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.build()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("patch\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRequestVerb(t *testing.T) {
	tests := map[string]struct {
		method, url string
		want        string
	}{
		"get named":              {http.MethodGet, "/api/v1/namespaces/ns/configmaps/c", "GET"},
		"list namespaced":        {http.MethodGet, "/api/v1/namespaces/ns/configmaps", "LIST"},
		"list all namespaces":    {http.MethodGet, "/apis/apps/v1/replicasets?limit=500", "LIST"},
		"get namespace":          {http.MethodGet, "/api/v1/namespaces/ns", "GET"},
		"list namespaces":        {http.MethodGet, "/api/v1/namespaces", "LIST"},
		"watch by query":         {http.MethodGet, "/api/v1/pods?watch=true&resourceVersion=1", "WATCH"},
		"watch by path":          {http.MethodGet, "/api/v1/watch/pods", "WATCH"},
		"delete":                 {http.MethodDelete, "/apis/apps/v1/namespaces/ns/replicasets/r", "DELETE"},
		"delete collection":      {http.MethodDelete, "/api/v1/namespaces/ns/pods", "DELETECOLLECTION"},
		"patch cluster-scoped":   {http.MethodPatch, "/apis/rbac.authorization.k8s.io/v1/clusterroles/x", "PATCH"},
		"create event":           {http.MethodPost, "/api/v1/namespaces/ns/events", "POST"},
		"subresource":            {http.MethodGet, "/api/v1/namespaces/ns/pods/p/status", "GET"},
		"discovery of a version": {http.MethodGet, "/apis/apps/v1", "NONRESOURCE"},
		"discovery root":         {http.MethodGet, "/apis", "NONRESOURCE"},
		"version":                {http.MethodGet, "/version", "NONRESOURCE"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			u, err := url.Parse("https://127.0.0.1:6443" + tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := requestVerb(&http.Request{Method: tc.method, URL: u}); got != tc.want {
				t.Errorf("requestVerb(%s %s) = %s, want %s", tc.method, tc.url, got, tc.want)
			}
		})
	}
}
