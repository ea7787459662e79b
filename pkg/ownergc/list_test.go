package ownergc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// bigList is a list response of n objects with every field set, larger
// than readPartialList's read buffer when n is in the hundreds.
func bigList(t testing.TB, n int) (*metav1.PartialObjectMetadataList, []byte) {
	list := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "4711", Continue: "next-page",
		RemainingItemCount: ptr.To[int64](12)}}
	for i := range n {
		obj := fullObject(fmt.Sprintf("web-%d", i))
		if i%3 == 0 {
			obj.DeletionTimestamp, obj.Finalizers = nil, nil
		}
		list.Items = append(list.Items, *obj)
	}
	return list, encodeProtobuf(t, withKind(list.DeepCopy(), "PartialObjectMetadataList"))
}

// wantList is what readPartialList must make of list.
func wantList(list *metav1.PartialObjectMetadataList) *metav1.PartialObjectMetadataList {
	out := &metav1.PartialObjectMetadataList{ListMeta: list.ListMeta}
	for i := range list.Items {
		out.Items = append(out.Items, metav1.PartialObjectMetadata{ObjectMeta: slimmed(&list.Items[i])})
	}
	return out
}

// testMetaClient is a metaClient of a TLS test server that answers with
// handler (TLS: client-go ignores DisableCompression over plain HTTP).
func testMetaClient(t *testing.T, handler http.HandlerFunc) *metaClient {
	t.Helper()
	srv := httptest.NewTLSServer(handler)
	t.Cleanup(srv.Close)
	c, err := newMetaClient(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReadPartialList: a list response decodes, as it arrives, to the
// fields the collector reads of each object, however the stream splits it
// (one byte per read, half reads, all at once); a JSON response (an API
// server that cannot send protobuf object metadata) decodes to the same;
// anything else is an error.
func TestReadPartialList(t *testing.T) {
	list, data := bigList(t, 300)
	if len(data) <= watchReadBuffer {
		t.Fatalf("the list is %d bytes, not more than the read buffer (%d)", len(data), watchReadBuffer)
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	}
	for name, wrap := range readers {
		t.Run(name, func(t *testing.T) {
			got, err := readPartialList(wrap(bytes.NewReader(data)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantList(list), got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	t.Run("empty list", func(t *testing.T) {
		empty := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}}
		got, err := readPartialList(bytes.NewReader(encodeProtobuf(t, withKind(empty.DeepCopy(), "PartialObjectMetadataList"))))
		if err != nil || got.ResourceVersion != "9" || len(got.Items) != 0 {
			t.Errorf("got %+v, %v; want no items at resourceVersion 9", got, err)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		partial := withKind(list.DeepCopy(), "PartialObjectMetadataList")
		// A full list: what an API server that cannot send object metadata
		// answers to the Accept header's last choice, application/json.
		full := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, ListMeta: list.ListMeta}
		for _, item := range list.Items {
			full.Items = append(full.Items, corev1.ConfigMap{ObjectMeta: item.ObjectMeta, Data: map[string]string{"k": "v"}})
		}
		for name, obj := range map[string]any{"PartialObjectMetadataList": partial, "ConfigMapList": full} {
			body, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readPartialList(bytes.NewReader(body))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for i := range got.Items {
				got.Items[i].ObjectMeta = slimmed(&got.Items[i])
			}
			if diff := cmp.Diff(wantList(list).Items, got.Items); diff != "" || got.ResourceVersion != list.ResourceVersion {
				t.Errorf("%s: resourceVersion %q; items (-want +got):\n%s", name, got.ResourceVersion, diff)
			}
		}
	})

	_, smallData := bigList(t, 3)
	envelope := func(t *testing.T, fields ...[]byte) []byte {
		t.Helper()
		return append(bytes.Clone(protobufPrefix), bytes.Join(fields, nil)...)
	}
	field := func(num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
	}
	typeMeta := func(apiVersion, kind string) []byte {
		return field(1, append(field(1, []byte(apiVersion)), field(2, []byte(kind))...))
	}
	raw := func(t *testing.T) []byte {
		t.Helper()
		_, r, ok := slimKind(smallData)
		if !ok {
			t.Fatal("the small list has no envelope")
		}
		return r
	}
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"a Status": {encodeProtobuf(t, withKind(&metav1.Status{Code: 500}, "Status")), "want meta.k8s.io/v1, Kind=PartialObjectMetadataList"},
		"no type":  {envelope(t, field(2, raw(t))), "want meta.k8s.io/v1"},
		"no list":  {envelope(t, typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList")), "no list in the response"},
		"the list before its type": {envelope(t, field(2, raw(t)), typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList")),
			"want meta.k8s.io/v1"},
		"compressed envelope": {envelope(t, typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList"), field(2, raw(t)), field(3, []byte("gzip"))),
			"encoded or non-protobuf envelope"},
		"an object larger than allowed": {envelope(t, typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList"),
			protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 1<<40),
			protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), maxObjectBytes+1)), "more than"},
		"an object overrunning its list": {envelope(t, typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList"),
			field(2, protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.BytesType), 50))), "in a message of 1 bytes left"},
		"a group": {envelope(t, typeMeta("meta.k8s.io/v1", "PartialObjectMetadataList"),
			field(2, protowire.AppendTag(nil, 7, protowire.StartGroupType))), "wire type 3"},
		"not JSON": {[]byte("<html>bad gateway</html>"), "not protobuf"},
		"nothing":  {nil, "not protobuf"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readPartialList(bytes.NewReader(c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %+v, %v; want an error with %q", got, err, c.want)
			}
		})
	}

	// A response cut short anywhere up to the end of the list is an error,
	// never a shorter list. (The envelope's last fields, contentEncoding
	// and contentType, always empty, may be missing: protobuf cannot tell
	// a cut there from their absence; HTTP's framing tells it, see
	// TestMetaClientList.)
	t.Run("cut short", func(t *testing.T) {
		trailer := []byte{0x1a, 0, 0x22, 0}
		if !bytes.HasSuffix(smallData, trailer) {
			t.Fatalf("the list's envelope does not end with empty contentEncoding and contentType: % x", smallData[len(smallData)-8:])
		}
		for n := len(protobufPrefix); n < len(smallData)-len(trailer); n++ {
			got, err := readPartialList(bytes.NewReader(smallData[:n]))
			if err == nil {
				t.Fatalf("cut after %d of %d bytes: no error, a list of %d items", n, len(smallData), len(got.Items))
			}
		}
	})
}

// FuzzReadPartialList: whatever protobuf the metadata client's decoder
// reads as a list of object metadata, readPartialList reads as the same
// list of the fields the collector reads, when the response arrives a byte
// at a time; nothing makes it panic.
func FuzzReadPartialList(f *testing.F) {
	_, data := bigList(f, 3)
	f.Add(data)
	f.Add(encodeProtobuf(f, withKind(&metav1.PartialObjectMetadataList{}, "PartialObjectMetadataList")))
	f.Add(encodeProtobuf(f, withKind(&metav1.Status{Code: 500}, "Status")))
	std := protobufInfo(f, metainternalversionscheme.Codecs.WithoutConversion()).Serializer
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readPartialList(iotest.OneByteReader(bytes.NewReader(data)))
		want, _, errStd := std.Decode(data, nil, &metav1.PartialObjectMetadataList{})
		if !bytes.HasPrefix(data, protobufPrefix) || errStd != nil {
			return
		}
		w, ok := want.(*metav1.PartialObjectMetadataList)
		if !ok || w.Kind != partialObjectMetadataListGVK.Kind {
			return
		}
		if err != nil {
			// The envelope's fields out of the API server's order (the
			// list before its type) are refused; so are nested fields the
			// generated decoder skips without reading them through.
			return
		}
		if diff := cmp.Diff(wantList(w), got); diff != "" {
			t.Fatalf("(-std +stream):\n%s", diff)
		}
	})
}

// TestMetaClientList: the monitors' list, through client-go's REST client
// over TLS: a protobuf list decoded as it arrives, asked for uncompressed;
// an error status is the API error the reflector acts on (410 Gone:
// relist from scratch); a server that stops mid-list fails the list.
func TestMetaClientList(t *testing.T) {
	list, data := bigList(t, 200)
	c := testMetaClient(t, func(w http.ResponseWriter, r *http.Request) {
		if enc := r.Header.Get("Accept-Encoding"); enc != "" {
			t.Errorf("%s: Accept-Encoding %q, want none (responses uncompressed)", r.URL, enc)
		}
		switch r.URL.Query().Get("resourceVersion") {
		case "expired":
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			w.WriteHeader(http.StatusGone)
			_, _ = w.Write(encodeProtobuf(t, withKind(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone,
				Reason: metav1.StatusReasonExpired, Message: "too old resource version"}, "Status")))
		case "cut":
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			w.Header().Set("Content-Length", fmt.Sprint(len(data)))
			_, _ = w.Write(data[:len(data)/2])
		default:
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			_, _ = w.Write(data)
		}
	})
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

	got, err := c.list(t.Context(), gvr, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantList(list), got); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if _, err := c.list(t.Context(), gvr, metav1.ListOptions{ResourceVersion: "expired"}); !apierrors.IsResourceExpired(err) {
		t.Errorf("list at an expired resourceVersion: %v, want the 410 Expired error", err)
	}
	if got, err := c.list(t.Context(), gvr, metav1.ListOptions{ResourceVersion: "cut"}); err == nil {
		t.Errorf("list cut in half: no error, %d items", len(got.Items))
	}
}

// TestMonitorListsConsistently: a monitor's reflector starts with a plain
// list, not a streaming list, and asks for it whole (no limit) and
// consistent (no resourceVersion), never "any version"
// (resourceVersion=0): kube-apiserver
// answers a list at resourceVersion 0 of a resource whose watch cache cannot
// initialize (a CRD whose conversion webhook is down) with an empty list,
// and the graph would then miss every object of the resource. A relist
// is consistent too, not one from the watch cache at the last version
// seen, which may lag what was written before it: a relist ends a failure
// only if it holds every write before it.
func TestMonitorListsConsistently(t *testing.T) {
	list, _ := bigList(t, 3)
	list.Continue, list.RemainingItemCount = "", nil // one page
	data := encodeProtobuf(t, withKind(list, "PartialObjectMetadataList"))
	var mu sync.Mutex
	var queries []string
	c := testMetaClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
			w.WriteHeader(http.StatusOK)
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(data)
	})
	m := &monitor{res: newResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "ConfigMap", true)}
	lw := m.listWatch(c, func(context.Context, error) {})
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := cache.NewReflectorWithOptions(lw, &metav1.PartialObjectMetadata{}, store, cache.ReflectorOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.RunWithContext(ctx)
	}()
	stop := func() { cancel(); <-done }
	defer stop() // before the server closes: its watch handler waits for the reflector
	eventually(t, 10*time.Second, "the reflector to list and watch", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(queries) >= 2, nil
	})
	stop()
	if got := len(store.List()); got != 3 {
		t.Errorf("the reflector's store holds %d objects, want the list's 3", got)
	}
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(queries)
	}
	got := sent()
	if q, _ := url.ParseQuery(got[0]); q.Has("watch") || q.Has("sendInitialEvents") || q.Has("resourceVersion") || q.Has("limit") {
		t.Errorf("first request %q: want a list without resourceVersion (consistent) nor limit (whole), not a streaming list", got[0])
	}
	if q, _ := url.ParseQuery(got[1]); q.Get("watch") != "true" || q.Get("resourceVersion") != "4711" {
		t.Errorf("second request %q: want a watch from the list's resourceVersion 4711", got[1])
	}

	lister := lw.(cache.ListerWithContext)
	for _, opts := range []metav1.ListOptions{
		{ResourceVersion: "4711"},
		{ResourceVersion: "4711", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, Limit: 500},
	} {
		if _, err := lister.ListWithContext(t.Context(), opts); err != nil {
			t.Fatal(err)
		}
		got = sent()
		if q, _ := url.ParseQuery(got[len(got)-1]); q.Has("resourceVersion") || q.Has("resourceVersionMatch") || q.Has("limit") {
			t.Errorf("a relist with %+v sent %q; want a consistent, whole list", opts, got[len(got)-1])
		}
	}
}
