package ownergc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// The monitors read every object of every resource: at start-up, and for
// each change after. The metadata client decodes each object whole,
// managed fields, labels and annotations included (most of its bytes),
// only for the collector to drop them at once. The monitors' client
// therefore decodes the API server's protobuf differently (slimCodecs):
//
//   - object metadata (meta.k8s.io/v1 PartialObjectMetadata and its list)
//     is decoded straight into what the collector keeps: name, namespace,
//     UID, resourceVersion, deletionTimestamp, ownerReferences and
//     finalizers. Everything else is skipped unread.
//     Any other object (a Status in an error event, JSON) goes to the
//     metadata client's own decoder.
//   - a watch event's envelope is read without copying the object's bytes
//     out of the frame: client-go's watch decoder decodes the object from
//     them before it reads the next frame, and the slim decoder copies
//     what it keeps.
//   - the watch stream is read through a buffer of watchReadBuffer bytes,
//     not one frame at a time: each read of an HTTP/2 response body of 4
//     KiB or more makes the transport send a WINDOW_UPDATE, one write on
//     the connection per few objects otherwise.
//   - a list response is decoded as it arrives (readPartialList), one
//     object at a time through a buffer of watchReadBuffer bytes: its
//     bytes, most of them managed fields the collector skips, are never
//     held whole (a list of 33,000 objects is about 40 MB of them).
//
// In a profile of a start-up on 100,000 objects, reading the watch events
// took about a quarter of the CPU time the metadata client's decoding did.

// watchReadBuffer is the read size of a watch stream.
const watchReadBuffer = 64 << 10

// protobufPrefix starts every protobuf-encoded Kubernetes object.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// slimCodecs is a negotiated serializer whose protobuf decoders are the
// slim ones; everything else is ns's.
type slimCodecs struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func newSlimCodecs(ns runtime.NegotiatedSerializer) slimCodecs {
	infos := slices.Clone(ns.SupportedMediaTypes())
	for i := range infos {
		if infos[i].MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		infos[i].Serializer = slimDecoder{infos[i].Serializer}
		if s := infos[i].StreamSerializer; s != nil {
			stream := *s
			stream.Serializer = watchEventDecoder{stream.Serializer}
			stream.Framer = bufferedFramer{stream.Framer}
			infos[i].StreamSerializer = &stream
		}
	}
	return slimCodecs{NegotiatedSerializer: ns, infos: infos}
}

func (c slimCodecs) SupportedMediaTypes() []runtime.SerializerInfo { return c.infos }

// bufferedFramer reads frames through a buffer of watchReadBuffer bytes.
type bufferedFramer struct{ runtime.Framer }

func (f bufferedFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return f.Framer.NewFrameReader(bufferedReadCloser{bufio.NewReaderSize(r, watchReadBuffer), r})
}

type bufferedReadCloser struct {
	*bufio.Reader
	io.Closer
}

// watchEventDecoder decodes a protobuf watch event's envelope; the
// event's object bytes are the frame's own (see above).
type watchEventDecoder struct{ runtime.Serializer }

func (d watchEventDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{}
	err := eachField(data, watchEventFields, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			ev.Type = eventTypeString(v)
		case 2: // RawExtension
			return eachField(v, rawExtensionFields, func(_ protowire.Number, raw []byte) error {
				ev.Object.Raw = raw
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("decode watch event: %w", err)
	}
	return ev, &schema.GroupVersionKind{}, nil
}

// eventTypeString returns v as a string, without allocating for the
// event types there are.
func eventTypeString(v []byte) string {
	switch string(v) {
	case "ADDED":
		return "ADDED"
	case "MODIFIED":
		return "MODIFIED"
	case "DELETED":
		return "DELETED"
	case "BOOKMARK":
		return "BOOKMARK"
	case "ERROR":
		return "ERROR"
	}
	return string(v)
}

// slimDecoder decodes object metadata slim (see above), anything else
// with the protobuf serializer it wraps.
type slimDecoder struct{ runtime.Serializer }

var (
	partialObjectMetadataGVK     = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")
	partialObjectMetadataListGVK = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadataList")
)

func (d slimDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	gvk, raw, ok := slimKind(data)
	var obj runtime.Object
	var err error
	switch {
	case !ok:
	case gvk == partialObjectMetadataGVK:
		obj, ok, err = decodeSlimInto(into, gvk, raw, decodePartial)
	case gvk == partialObjectMetadataListGVK:
		obj, ok, err = decodeSlimInto(into, gvk, raw, decodePartialList)
	}
	if !ok {
		return d.Serializer.Decode(data, defaults, into)
	}
	return obj, &gvk, err
}

// decodeSlimInto decodes raw with decode into into, a *T, or into a new T
// when into is nil, and sets its kind to gvk. ok is false when into is of
// another type: the wrapped decoder's business.
func decodeSlimInto[T any, P interface {
	*T
	runtime.Object
	SetGroupVersionKind(schema.GroupVersionKind)
}](into runtime.Object, gvk schema.GroupVersionKind, raw []byte, decode func([]byte, P) error) (_ runtime.Object, ok bool, _ error) {
	obj, ok := into.(P)
	if into != nil && !ok {
		return nil, false, nil
	}
	if obj == nil {
		obj = new(T)
	}
	*obj = *new(T)
	if err := decode(raw, obj); err != nil {
		return nil, true, err
	}
	obj.SetGroupVersionKind(gvk)
	return obj, true, nil
}

// The fields each slim decoder reads, by message (see the generated.proto
// files of k8s.io/apimachinery's runtime and meta/v1 packages).
var (
	unknownFields      = fieldSet(1, 2, 3, 4) // typeMeta, raw, contentEncoding, contentType
	typeMetaFields     = fieldSet(1, 2)       // apiVersion, kind
	watchEventFields   = fieldSet(1, 2)       // type, object
	rawExtensionFields = fieldSet(1)          // raw
	listFields         = fieldSet(1, 2)       // metadata, items
	partialFields      = fieldSet(1)          // metadata
	// name, namespace, uid, resourceVersion, deletionTimestamp,
	// ownerReferences, finalizers
	objectMetaFields = fieldSet(1, 3, 5, 6, 9, 13, 14)
)

// envelope is what the slim decoders read of an object's envelope
// (runtime.Unknown) besides the object's bytes: its type, and whether the
// bytes are anything but plain protobuf.
type envelope struct {
	apiVersion, kind []byte
	encoded          bool // a contentEncoding, or a contentType other than protobuf
}

// field reads the envelope's field num (typeMeta, contentEncoding or
// contentType) of value v; the envelope keeps subslices of v.
func (e *envelope) field(num protowire.Number, v []byte) error {
	switch num {
	case 1: // TypeMeta
		return eachField(v, typeMetaFields, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				e.apiVersion = v
			case 2:
				e.kind = v
			}
			return nil
		})
	case 3: // contentEncoding
		e.encoded = e.encoded || len(v) != 0
	case 4: // contentType
		e.encoded = e.encoded || (len(v) != 0 && string(v) != runtime.ContentTypeProtobuf)
	}
	return nil
}

// metadataKind is the kind of the object, ok only for object metadata or
// a list of it.
func (e *envelope) metadataKind() (schema.GroupVersionKind, bool) {
	if string(e.apiVersion) != metav1.SchemeGroupVersion.String() {
		return schema.GroupVersionKind{}, false
	}
	switch string(e.kind) {
	case partialObjectMetadataGVK.Kind:
		return partialObjectMetadataGVK, true
	case partialObjectMetadataListGVK.Kind:
		return partialObjectMetadataListGVK, true
	}
	return schema.GroupVersionKind{}, false
}

// slimKind reads the envelope (runtime.Unknown) of a protobuf object: its
// kind and its bytes, ok only for object metadata in plain protobuf.
func slimKind(data []byte) (gvk schema.GroupVersionKind, raw []byte, ok bool) {
	body, found := bytes.CutPrefix(data, protobufPrefix)
	if !found {
		return gvk, nil, false
	}
	var env envelope
	err := eachField(body, unknownFields, func(num protowire.Number, v []byte) error {
		if num == 2 {
			raw = v
			return nil
		}
		return env.field(num, v)
	})
	if err != nil || env.encoded {
		return gvk, nil, false
	}
	if gvk, ok = env.metadataKind(); !ok {
		return gvk, nil, false
	}
	return gvk, raw, true
}

func decodePartialList(data []byte, list *metav1.PartialObjectMetadataList) error {
	return eachField(data, listFields, func(num protowire.Number, v []byte) error {
		return decodeListField(list, num, v)
	})
}

// decodeListField decodes the list's field num of value v: its ListMeta,
// or one more item (slim).
func decodeListField(list *metav1.PartialObjectMetadataList, num protowire.Number, v []byte) error {
	switch num {
	case 1:
		return list.ListMeta.Unmarshal(v)
	case 2:
		list.Items = append(list.Items, metav1.PartialObjectMetadata{})
		return decodePartial(v, &list.Items[len(list.Items)-1])
	}
	return nil
}

func decodePartial(data []byte, obj *metav1.PartialObjectMetadata) error {
	return eachField(data, partialFields, func(_ protowire.Number, v []byte) error {
		return decodeSlimMeta(v, &obj.ObjectMeta)
	})
}

// decodeSlimMeta decodes the fields of an ObjectMeta that the collector
// reads, merging into m as protobuf does (the last value of a field wins,
// repeated fields append).
func decodeSlimMeta(data []byte, m *metav1.ObjectMeta) error {
	return eachField(data, objectMetaFields, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 9:
			if m.DeletionTimestamp == nil {
				m.DeletionTimestamp = &metav1.Time{}
			}
			return m.DeletionTimestamp.Unmarshal(v)
		case 13:
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{})
			return m.OwnerReferences[len(m.OwnerReferences)-1].Unmarshal(v)
		case 14:
			m.Finalizers = append(m.Finalizers, string(v))
		}
		return nil
	})
}

// fieldNums is a set of protobuf field numbers (below 64).
type fieldNums uint64

func fieldSet(nums ...protowire.Number) fieldNums {
	var f fieldNums
	for _, n := range nums {
		f |= 1 << n
	}
	return f
}

func (f fieldNums) has(n protowire.Number) bool { return n < 64 && f&(1<<n) != 0 }

// eachField calls fn with each field of the protobuf message in data whose
// number is in want, in order, and skips the others unread. Every field
// the slim decoders read is length-delimited (a string, bytes, a message
// or a map entry); one with another wire type is an error, as it is to
// the generated decoders.
func eachField(data []byte, want fieldNums, fn func(num protowire.Number, v []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if !want.has(num) {
			if n = skipField(num, typ, data); n < 0 {
				return protowire.ParseError(n)
			}
			data = data[n:]
			continue
		}
		if typ != protowire.BytesType {
			return fmt.Errorf("protobuf field %d: wire type %d, want %d", num, typ, protowire.BytesType)
		}
		v, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// skipField returns the length of the value of a field of type typ at the
// start of data, or a negative protowire error code. Groups (which no
// Kubernetes type has) are skipped as the generated decoders skip them:
// up to the end marker of the same depth, whatever its field number.
func skipField(num protowire.Number, typ protowire.Type, data []byte) int {
	if typ != protowire.StartGroupType {
		return protowire.ConsumeFieldValue(num, typ, data)
	}
	total := 0
	for depth := 1; depth > 0; {
		num, typ, n := protowire.ConsumeTag(data[total:])
		if n < 0 {
			return n
		}
		total += n
		switch typ {
		case protowire.StartGroupType:
			depth++
		case protowire.EndGroupType:
			depth--
		default:
			if n = protowire.ConsumeFieldValue(num, typ, data[total:]); n < 0 {
				return n
			}
			total += n
		}
	}
	return total
}

// maxObjectBytes bounds the size of one object of a list response, and of
// the fields of its envelope: a length above it is a corrupt response,
// not an allocation to make (kube-apiserver refuses objects of more than a
// few MiB).
const maxObjectBytes = 64 << 20

// readPartialList reads a list response of object metadata from r as it
// arrives. A protobuf PartialObjectMetadataList is decoded slim, one
// object at a time (see above); any other response (JSON, from an API
// server that cannot serve protobuf or object metadata) is read whole and
// decoded as JSON into the list, as client-go's metadata client falls
// back to. A response cut short is an error, never a shorter list.
func readPartialList(r io.Reader) (*metav1.PartialObjectMetadataList, error) {
	br := bufio.NewReaderSize(r, watchReadBuffer)
	if prefix, err := br.Peek(len(protobufPrefix)); err != nil || !bytes.Equal(prefix, protobufPrefix) {
		body, err := io.ReadAll(br)
		if err != nil {
			return nil, err
		}
		list := &metav1.PartialObjectMetadataList{}
		if err := utiljson.Unmarshal(body, list); err != nil {
			return nil, fmt.Errorf("decode list (not protobuf): %w", err)
		}
		return list, nil
	}
	_, _ = br.Discard(len(protobufPrefix))
	p := &protoReader{r: br}
	list := &metav1.PartialObjectMetadataList{}
	var env envelope
	listed := false
	for {
		num, typ, err := p.tag()
		if errors.Is(err, io.EOF) {
			break // the envelope (runtime.Unknown) ends with the response
		}
		if err != nil {
			return nil, err
		}
		if typ != protowire.BytesType || !unknownFields.has(num) {
			if err := p.skip(num, typ, -1); err != nil {
				return nil, err
			}
			continue
		}
		if num == 2 { // raw: the list itself, after its type
			if err := checkListType(&env); err != nil {
				return nil, err
			}
			if err := p.readList(list); err != nil {
				return nil, err
			}
			listed = true
			continue
		}
		v, err := p.field(-1)
		if err != nil {
			return nil, err
		}
		if num == 1 {
			v = slices.Clone(v) // the envelope keeps the type; p's buffer is reused
		}
		if err := env.field(num, v); err != nil {
			return nil, fmt.Errorf("decode list: %w", err)
		}
	}
	if env.encoded {
		return nil, fmt.Errorf("decode list: an encoded or non-protobuf envelope, which the API server never sends")
	}
	if err := checkListType(&env); err != nil {
		return nil, err
	}
	if !listed {
		// A list always has its raw field, even when empty (its ListMeta):
		// a response without it was cut after the type.
		return nil, fmt.Errorf("decode list: no list in the response")
	}
	return list, nil
}

func checkListType(env *envelope) error {
	if gvk, ok := env.metadataKind(); !ok || gvk != partialObjectMetadataListGVK {
		return fmt.Errorf("decode list: got apiVersion %q kind %q, want %s", env.apiVersion, env.kind, partialObjectMetadataListGVK)
	}
	return nil
}

// protoReader reads a protobuf message from a stream, counting the bytes
// read so that a nested message's end is known.
type protoReader struct {
	r   *bufio.Reader
	off int64 // bytes read
	buf []byte
}

func (p *protoReader) ReadByte() (byte, error) {
	b, err := p.r.ReadByte()
	if err == nil {
		p.off++
	}
	return b, err
}

// tag reads a field's tag. io.EOF: the stream ended before it, cleanly.
func (p *protoReader) tag() (protowire.Number, protowire.Type, error) {
	v, err := binary.ReadUvarint(p) // io.ErrUnexpectedEOF when cut inside the tag
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, fmt.Errorf("decode list: invalid protobuf field number %d", num)
	}
	return num, typ, nil
}

// length reads a length-delimited field's length, which must fit in left
// bytes (left < 0: in a message whose end is the stream's) and be at most
// bound.
func (p *protoReader) length(left int64, bound int64) (int64, error) {
	v, err := binary.ReadUvarint(p)
	if err != nil {
		return 0, noEOF(err)
	}
	if left >= 0 && v > uint64(left) {
		return 0, fmt.Errorf("decode list: a field of %d bytes in a message of %d bytes left", v, left)
	}
	if v > uint64(bound) {
		return 0, fmt.Errorf("decode list: a field of %d bytes, more than %d", v, bound)
	}
	return int64(v), nil
}

// field reads the value of a length-delimited field into the reader's
// buffer, valid until the next call.
func (p *protoReader) field(left int64) ([]byte, error) {
	n, err := p.length(left, maxObjectBytes)
	if err != nil {
		return nil, err
	}
	p.buf = slices.Grow(p.buf[:0], int(n))[:n]
	if _, err := io.ReadFull(p.r, p.buf); err != nil {
		return nil, noEOF(err)
	}
	p.off += n
	return p.buf, nil
}

// skip skips the value of a field of type typ (left as for length).
func (p *protoReader) skip(num protowire.Number, typ protowire.Type, left int64) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := binary.ReadUvarint(p)
		return noEOF(err)
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var err error
		if n, err = p.length(left, math.MaxInt64); err != nil {
			return err
		}
	default: // groups: no Kubernetes type has them
		return fmt.Errorf("decode list: protobuf field %d of wire type %d", num, typ)
	}
	d, err := p.r.Discard(int(n))
	p.off += int64(d)
	return noEOF(err)
}

// readList decodes the list (field raw of the envelope) into list, as
// decodePartialList does.
func (p *protoReader) readList(list *metav1.PartialObjectMetadataList) error {
	size, err := p.length(-1, math.MaxInt64)
	if err != nil {
		return err
	}
	end := p.off + size
	for p.off < end {
		num, typ, err := p.tag()
		if err != nil {
			return noEOF(err)
		}
		if typ != protowire.BytesType || !listFields.has(num) {
			if err := p.skip(num, typ, end-p.off); err != nil {
				return err
			}
			continue
		}
		v, err := p.field(end - p.off)
		if err != nil {
			return err
		}
		if err := decodeListField(list, num, v); err != nil {
			return fmt.Errorf("decode list: %w", err)
		}
	}
	if p.off != end {
		return fmt.Errorf("decode list: a field overran the list by %d bytes", p.off-end)
	}
	return nil
}

// noEOF turns an end of the stream inside a message into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
