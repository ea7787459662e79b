package ownergc

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// fullObject is object metadata with every field set, as the API server
// sends it.
func fullObject(name string) *metav1.PartialObjectMetadata {
	deleted := metav1.NewTime(time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC))
	return &metav1.PartialObjectMetadata{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, GenerateName: "web-", Namespace: "team-a",
			UID: types.UID("6f1c2f1e-3b7a-4c55-9a1d-" + name), ResourceVersion: "123456", Generation: 7,
			CreationTimestamp:          metav1.NewTime(time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)),
			DeletionTimestamp:          &deleted,
			DeletionGracePeriodSeconds: ptr.To[int64](30),
			Labels:                     map[string]string{"app": "web", "pod-template-hash": "5d8f7c"},
			Annotations:                map[string]string{"kubernetes.io/change-cause": "kubectl apply", "team": "a"},
			OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-5d8f7c", UID: "rs-uid", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)},
				{APIVersion: "v1", Kind: "ConfigMap", Name: "settings", UID: "cm-uid"},
			},
			Finalizers: []string{metav1.FinalizerDeleteDependents, "example.com/keep"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`)}},
		},
	}
}

// slimmed is what the slim decoder must make of obj: the fields the
// collector reads.
func slimmed(obj *metav1.PartialObjectMetadata) metav1.ObjectMeta {
	m := obj.ObjectMeta
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp, OwnerReferences: m.OwnerReferences, Finalizers: m.Finalizers}
}

// protobufInfo is the metadata client's protobuf serializer, and the
// slim codec's.
func protobufInfo(t testing.TB, ns runtime.NegotiatedSerializer) runtime.SerializerInfo {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	return info
}

func encodeProtobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobufInfo(t, metainternalversionscheme.Codecs.WithoutConversion()).Serializer.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func withKind[T interface {
	runtime.Object
	SetGroupVersionKind(schema.GroupVersionKind)
}](obj T, kind string) T {
	obj.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind(kind))
	return obj
}

// TestSlimDecoder: object metadata and lists of it decode to the fields the
// collector reads, equal to what the metadata client's decoder reads of
// them (a bookmark's annotations are dropped too); other objects (a
// Status) decode as the metadata client decodes them.
func TestSlimDecoder(t *testing.T) {
	std := protobufInfo(t, metainternalversionscheme.Codecs.WithoutConversion()).Serializer
	slim := protobufInfo(t, newSlimCodecs(metainternalversionscheme.Codecs.WithoutConversion())).Serializer

	bookmark := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true", "other": "x"}}}
	minimal := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u"}}
	for name, obj := range map[string]*metav1.PartialObjectMetadata{
		"full": fullObject("web-1"), "bookmark": bookmark, "minimal": minimal, "empty": {},
	} {
		t.Run(name, func(t *testing.T) {
			data := encodeProtobuf(t, withKind(obj.DeepCopy(), "PartialObjectMetadata"))
			for _, into := range []runtime.Object{nil, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "stale", Labels: map[string]string{"x": "y"}}}} {
				got, gvk, err := slim.Decode(data, nil, into)
				if err != nil {
					t.Fatal(err)
				}
				if *gvk != partialObjectMetadataGVK {
					t.Errorf("gvk %v", gvk)
				}
				if into != nil && got != into {
					t.Error("did not decode into the object given")
				}
				ref, _, err := std.Decode(data, nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				want := slimmed(ref.(*metav1.PartialObjectMetadata))
				if diff := cmp.Diff(want, got.(*metav1.PartialObjectMetadata).ObjectMeta); diff != "" {
					t.Errorf("slim decode (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(slimmed(obj), want); diff != "" {
					t.Errorf("the reference decoder disagrees with the object encoded (-want +got):\n%s", diff)
				}
			}
		})
	}

	t.Run("list", func(t *testing.T) {
		list := withKind(&metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next"},
			Items: []metav1.PartialObjectMetadata{*fullObject("web-1"), *minimal, *fullObject("web-2")}}, "PartialObjectMetadataList")
		data := encodeProtobuf(t, list)
		got, _, err := slim.Decode(data, nil, &metav1.PartialObjectMetadataList{})
		if err != nil {
			t.Fatal(err)
		}
		l := got.(*metav1.PartialObjectMetadataList)
		if diff := cmp.Diff(list.ListMeta, l.ListMeta); diff != "" {
			t.Errorf("list meta (-want +got):\n%s", diff)
		}
		if len(l.Items) != len(list.Items) {
			t.Fatalf("%d items, want %d", len(l.Items), len(list.Items))
		}
		for i := range l.Items {
			if diff := cmp.Diff(slimmed(&list.Items[i]), l.Items[i].ObjectMeta); diff != "" {
				t.Errorf("item %d (-want +got):\n%s", i, diff)
			}
		}
	})

	t.Run("other kinds", func(t *testing.T) {
		status := withKind(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}, "Status")
		data := encodeProtobuf(t, status)
		got, _, err := slim.Decode(data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := std.Decode(data, nil, nil)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Status (-std +slim):\n%s", diff)
		}
		// Object metadata into another type is the wrapped decoder's
		// business (and error).
		data = encodeProtobuf(t, withKind(fullObject("x"), "PartialObjectMetadata"))
		_, _, errStd := std.Decode(data, nil, &metav1.Status{})
		_, _, errSlim := slim.Decode(data, nil, &metav1.Status{})
		if (errStd == nil) != (errSlim == nil) {
			t.Errorf("into another type: std %v, slim %v", errStd, errSlim)
		}
	})

	t.Run("malformed", func(t *testing.T) {
		data := encodeProtobuf(t, withKind(fullObject("x"), "PartialObjectMetadata"))
		for i := len(protobufPrefix) + 1; i < len(data); i += 7 {
			if _, _, err := slim.Decode(data[:i], nil, nil); err == nil {
				if _, _, errStd := std.Decode(data[:i], nil, nil); errStd != nil {
					t.Errorf("truncated at %d of %d: slim accepted what the metadata client refuses (%v)", i, len(data), errStd)
				}
			}
		}
		// A field the collector reads with another wire type: the name as
		// a varint.
		meta := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
		obj := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), meta)
		if err := decodePartial(obj, &metav1.PartialObjectMetadata{}); err == nil {
			t.Error("a name with the varint wire type decoded")
		}
	})
}

// FuzzSlimDecoder: whatever the metadata client's decoder reads as object
// metadata, the slim decoder reads too, with the same values of the fields
// the collector reads; nothing makes it panic.
func FuzzSlimDecoder(f *testing.F) {
	f.Add(encodeProtobuf(f, withKind(fullObject("web-1"), "PartialObjectMetadata")))
	f.Add(encodeProtobuf(f, withKind(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}, "PartialObjectMetadata")))
	f.Add(encodeProtobuf(f, withKind(&metav1.PartialObjectMetadataList{Items: []metav1.PartialObjectMetadata{*fullObject("a")}}, "PartialObjectMetadataList")))
	f.Add(encodeProtobuf(f, withKind(&metav1.Status{Code: 500}, "Status")))
	std := protobufInfo(f, metainternalversionscheme.Codecs.WithoutConversion()).Serializer
	slim := protobufInfo(f, newSlimCodecs(metainternalversionscheme.Codecs.WithoutConversion())).Serializer
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, errSlim := slim.Decode(data, nil, nil)
		want, _, errStd := std.Decode(data, nil, nil)
		if errStd != nil {
			return
		}
		if errSlim != nil {
			t.Fatalf("slim: %v; the metadata client's decoder read %T", errSlim, want)
		}
		switch w := want.(type) {
		case *metav1.PartialObjectMetadata:
			if diff := cmp.Diff(slimmed(w), got.(*metav1.PartialObjectMetadata).ObjectMeta); diff != "" {
				t.Fatalf("(-std +slim):\n%s", diff)
			}
		case *metav1.PartialObjectMetadataList:
			g := got.(*metav1.PartialObjectMetadataList)
			if len(g.Items) != len(w.Items) || !cmp.Equal(g.ListMeta, w.ListMeta) {
				t.Fatalf("list: %d items, %+v; want %d, %+v", len(g.Items), g.ListMeta, len(w.Items), w.ListMeta)
			}
			for i := range w.Items {
				if diff := cmp.Diff(slimmed(&w.Items[i]), g.Items[i].ObjectMeta); diff != "" {
					t.Fatalf("item %d (-std +slim):\n%s", i, diff)
				}
			}
		}
	})
}

// TestMetaClient: the collector's list, watch and delete client, through
// client-go's REST client and watch decoder, against a server answering as
// kube-apiserver does (protobuf list; a watch stream of length-prefixed
// events whose objects are protobuf object metadata or a Status; a Status
// for a refused delete): every event's object is whole although the
// envelopes' object bytes are not copied out of the stream's frame buffer,
// which the next event overwrites; lists and watches are the metadata
// client's requests; a delete sends its options in protobuf, and its
// refusal is the API error.
func TestMetaClient(t *testing.T) {
	objs := []*metav1.PartialObjectMetadata{fullObject("web-1"), fullObject("web-22"), fullObject("web-333")}
	objs[1].OwnerReferences = nil
	bookmark := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "500",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	status := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	events := []struct {
		typ watch.EventType
		obj runtime.Object
	}{
		{watch.Added, objs[0]}, {watch.Added, objs[1]}, {watch.Modified, objs[2]}, {watch.Bookmark, bookmark},
		{watch.Deleted, objs[0]}, {watch.Error, status},
	}
	var stream bytes.Buffer
	for _, ev := range events {
		kind := "PartialObjectMetadata"
		if _, ok := ev.obj.(*metav1.Status); ok {
			kind = "Status"
		}
		obj := ev.obj.DeepCopyObject().(interface {
			runtime.Object
			SetGroupVersionKind(schema.GroupVersionKind)
		})
		frame, err := (&metav1.WatchEvent{Type: string(ev.typ), Object: runtime.RawExtension{Raw: encodeProtobuf(t, withKind(obj, kind))}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		stream.Write(binary.BigEndian.AppendUint32(nil, uint32(len(frame))))
		stream.Write(frame)
	}
	list := encodeProtobuf(t, withKind(&metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "400"},
		Items: []metav1.PartialObjectMetadata{*objs[0], *objs[1]}}, "PartialObjectMetadataList"))

	var requests []string
	var deleted []*metav1.DeleteOptions
	std := protobufInfo(t, metainternalversionscheme.Codecs.WithoutConversion()).Serializer
	c := testMetaClient(t, func(w http.ResponseWriter, r *http.Request) {
		requests = append(requests, r.Method+" "+r.URL.String()+" "+r.Header.Get("Accept")+" "+r.Header.Get("Content-Type"))
		if enc := r.Header.Get("Accept-Encoding"); enc != "" {
			t.Errorf("%s %s: Accept-Encoding %q, want none (responses uncompressed)", r.Method, r.URL, enc)
		}
		if r.Method == http.MethodDelete {
			body, _ := io.ReadAll(r.Body)
			obj, _, err := std.Decode(body, nil, nil)
			if err != nil {
				t.Errorf("delete body: %v", err)
			}
			opts, _ := obj.(*metav1.DeleteOptions)
			deleted = append(deleted, opts)
			if len(deleted) == 2 {
				// kube-apiserver answers an error in the Accept header's
				// last choice: it converts no error to metadata.
				w.Header().Set("Content-Type", runtime.ContentTypeJSON)
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"precondition failed","reason":"Conflict","code":409}`))
				return
			}
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			_, _ = w.Write(encodeProtobuf(t, withKind(&metav1.Status{Status: metav1.StatusSuccess}, "Status")))
			return
		}
		if r.URL.Query().Get("watch") == "true" {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf+";stream=watch")
			_, _ = w.Write(stream.Bytes())
			return
		}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		_, _ = w.Write(list)
	})
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}

	l, err := c.list(t.Context(), gvr, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "400" || len(l.Items) != 2 || l.Items[0].Name != "web-1" || l.Items[1].UID != objs[1].UID {
		t.Errorf("list: %+v", l)
	}

	w, err := c.watch(t.Context(), gvr, metav1.ListOptions{ResourceVersion: "400", AllowWatchBookmarks: true,
		TimeoutSeconds: ptr.To[int64](60)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []watch.Event
	for ev := range w.ResultChan() {
		got = append(got, ev)
	}
	if len(got) != len(events) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(events), got)
	}
	for i, ev := range events {
		if got[i].Type != ev.typ {
			t.Errorf("event %d: type %s, want %s", i, got[i].Type, ev.typ)
		}
		switch want := ev.obj.(type) {
		case *metav1.PartialObjectMetadata:
			if diff := cmp.Diff(slimmed(want), got[i].Object.(*metav1.PartialObjectMetadata).ObjectMeta); diff != "" {
				t.Errorf("event %d (-want +got):\n%s", i, diff)
			}
		case *metav1.Status:
			s, ok := got[i].Object.(*metav1.Status)
			if !ok || s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
				t.Errorf("event %d: %#v, want the Status", i, got[i].Object)
			}
		}
	}

	pre := &metav1.Preconditions{UID: ptr.To(objs[0].UID), ResourceVersion: ptr.To("77")}
	opts := metav1.DeleteOptions{Preconditions: pre, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	if err := c.delete(t.Context(), gvr, "team-a", "web-1", opts); err != nil {
		t.Errorf("delete: %v", err)
	}
	if err := c.delete(t.Context(), schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", "node-1", opts); !apierrors.IsConflict(err) {
		t.Errorf("refused delete: %v, want a Conflict", err)
	}
	for i, got := range deleted {
		if got == nil || !cmp.Equal(opts.Preconditions, got.Preconditions) || !cmp.Equal(opts.PropagationPolicy, got.PropagationPolicy) {
			t.Errorf("delete %d sent %+v, want %+v", i, got, opts)
		}
	}

	wantRequests := []string{
		"GET /apis/apps/v1/replicasets?resourceVersion=0 " + acceptPartialList + " ",
		"GET /apis/apps/v1/replicasets?allowWatchBookmarks=true&resourceVersion=400&timeout=1m0s&timeoutSeconds=60&watch=true " + acceptPartial + " ",
		"DELETE /apis/apps/v1/namespaces/team-a/replicasets/web-1 " + acceptPartial + " " + runtime.ContentTypeProtobuf,
		"DELETE /api/v1/nodes/node-1 " + acceptPartial + " " + runtime.ContentTypeProtobuf,
	}
	if diff := cmp.Diff(wantRequests, requests); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}
