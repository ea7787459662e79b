package ownergc

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestResumeReadsWhereTheServerIs: a resumed watch awaits the resource
// version of a consistent list of one object; a version that is not a
// number (an aggregated API server's own) cannot be compared and ends the
// watch as expired, so that the reflector relists; a read that fails is an
// error, and nothing is awaited.
func TestResumeReadsWhereTheServerIs(t *testing.T) {
	for _, tc := range []struct {
		name, rv string
		code     int
		want     uint64
		expired  bool
	}{
		{name: "etcd revision", rv: "4711", want: 4711},
		{name: "opaque version", rv: "v-4711", expired: true},
		{name: "no version", rv: "", expired: true},
		{name: "server unavailable", code: http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			queries := make(chan url.Values, 1)
			client := testMetaClient(t, func(w http.ResponseWriter, req *http.Request) {
				queries <- req.URL.Query()
				if tc.code != 0 {
					http.Error(w, "unavailable", tc.code)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(&metav1.PartialObjectMetadataList{
					TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
					ListMeta: metav1.ListMeta{ResourceVersion: tc.rv}})
			})
			m := &monitor{res: resPod}
			err := m.resume(t.Context(), client)
			if q := <-queries; q.Get("limit") != "1" || q.Has("resourceVersion") {
				t.Errorf("read with query %v; want a consistent list of one object (limit=1, no resourceVersion)", q)
			}
			switch {
			case tc.want != 0:
				if err != nil || m.catchUp.Load() != tc.want || !m.catchingUpNow() {
					t.Errorf("resume: %v, awaits %d (catching up %v); want nil, %d", err, m.catchUp.Load(), m.catchingUpNow(), tc.want)
				}
			case tc.expired:
				if !apierrors.IsResourceExpired(err) || m.catchingUpNow() {
					t.Errorf("resume: %v (catching up %v); want a resource-expired error, nothing awaited", err, m.catchingUpNow())
				}
			default:
				if err == nil || apierrors.IsResourceExpired(err) || m.catchingUpNow() {
					t.Errorf("resume: %v (catching up %v); want the read's error, nothing awaited", err, m.catchingUpNow())
				}
			}
		})
	}
}
