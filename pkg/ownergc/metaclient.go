package ownergc

import (
	"bytes"
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// metaClient makes the collector's requests that read or write many
// objects: the monitors' lists and watches (every namespace), decoded with
// the slim codec (codec.go), and the workers' deletes, whose options it
// sends in protobuf. Its requests are otherwise those of client-go's
// metadata client, which can take neither: it sets its own codec, and it
// always sends delete options in JSON, which costs kube-apiserver about
// 60 us more per DELETE to decode (a fifth more than it spends to
// delete the object), measured in its profile during a cascade.
type metaClient struct {
	rest *rest.RESTClient
}

// metaParams encodes list options as the metadata client does.
var metaParams = func() runtime.ParameterCodec {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, versionV1)
	return runtime.NewParameterCodec(s)
}()

var versionV1 = schema.GroupVersion{Version: "v1"}

// The Accept headers of the metadata client's list and watch (and of the
// collector's deletes).
const (
	acceptPartialList = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1," +
		"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	acceptPartial = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1," +
		"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

// newMetaClient returns a metaClient for rc (as for
// metadata.NewForConfig).
func newMetaClient(rc *rest.Config) (*metaClient, error) {
	config := metadata.ConfigFor(rc)
	config.NegotiatedSerializer = newSlimCodecs(config.NegotiatedSerializer)
	// Lists uncompressed: kube-apiserver gzips a large list response for a
	// client that accepts it, which cost it a fifth of its CPU time in a
	// start-up on 100,000 objects (and the collector a fifth of its own to
	// inflate). Uncompressed, a list takes the bytes a watch list of the
	// same objects took (watches are never compressed).
	config.DisableCompression = true
	config.GroupVersion = &schema.GroupVersion{} // paths are absolute
	config.APIPath = "/this-value-should-never-be-sent"
	client, err := rest.RESTClientFor(config)
	if err != nil {
		return nil, err
	}
	return &metaClient{rest: client}, nil
}

// resourcePath is the path of gvr's objects in namespace (every namespace,
// or cluster-scoped, when ""), with the object's name when given.
func resourcePath(gvr schema.GroupVersionResource, namespace, name string) []string {
	p := []string{"apis", gvr.Group, gvr.Version}
	if gvr.Group == "" {
		p = []string{"api", gvr.Version}
	}
	if namespace != "" {
		p = append(p, "namespaces", namespace)
	}
	p = append(p, gvr.Resource)
	if name != "" {
		p = append(p, name)
	}
	return p
}

// list lists gvr's objects in every namespace, decoding the response as it
// arrives (readPartialList). As watch, it makes no retries of its own: a
// 429 is the monitor's failure at once, not half a minute of blindness.
func (c *metaClient) list(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	body, err := c.rest.Get().AbsPath(resourcePath(gvr, "", "")...).SetHeader("Accept", acceptPartialList).
		SpecificallyVersionedParams(&opts, metaParams, versionV1).MaxRetries(0).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = body.Close() }()
	list, err := readPartialList(body)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", gvr, err)
	}
	return list, nil
}

// watch opens a watch of gvr's objects in every namespace. An answer to
// retry later (429 or 5xx with Retry-After) is an error at once, not
// retried here: kube-apiserver answers so while it cannot serve the
// resource (a CRD whose storage is re-initializing and whose list fails,
// its conversion webhook down), and client-go would retry for half a
// minute and more while the monitor, blind, counted as following the
// resource. The error makes the monitor failing (holds wait on it), and the
// reflector retries with its own backoff.
func (c *metaClient) watch(ctx context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions) (watch.Interface, error) {
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	opts.Watch = true
	return c.rest.Get().AbsPath(resourcePath(gvr, "", "")...).SetHeader("Accept", acceptPartial).
		SpecificallyVersionedParams(&opts, metaParams, versionV1).Timeout(timeout).MaxRetries(0).Watch(ctx)
}

// deleteOptionsEncoder writes delete options as a protobuf object.
var deleteOptionsEncoder = protobuf.NewSerializer(nil, nil)

// delete deletes the named object of gvr in namespace ("" if
// cluster-scoped) with opts.
//
// It asks for the answer as metadata (acceptPartial): the collector reads
// nothing of a delete's answer but its status, and many deletes answer with
// the object: Pods, PersistentVolumeClaims, Services and ServiceAccounts,
// among others, answer with the deleted object, and any object whose
// deletion waits on finalizers or a grace period with the object as
// updated. kube-apiserver then sends its ObjectMeta alone, without
// converting and encoding the rest (a Pod's spec and status), and the
// collector reads fewer bytes. A Status (the answer of the other deletes)
// and errors keep what the collector reads of them: kube-apiserver converts
// neither, and answers an error in the header's last choice, plain JSON.
func (c *metaClient) delete(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, opts metav1.DeleteOptions) error {
	req, err := c.deleteRequest(gvr, namespace, name, opts)
	if err != nil {
		return err
	}
	return req.SetHeader("Accept", acceptPartial).Do(ctx).Error()
}

// deleteRequest is delete's request without its Accept header.
func (c *metaClient) deleteRequest(gvr schema.GroupVersionResource, namespace, name string, opts metav1.DeleteOptions) (*rest.Request, error) {
	opts.TypeMeta = metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "DeleteOptions"}
	var body bytes.Buffer
	if err := deleteOptionsEncoder.Encode(&opts, &body); err != nil {
		return nil, fmt.Errorf("encode delete options: %w", err)
	}
	return c.rest.Delete().AbsPath(resourcePath(gvr, namespace, name)...).
		SetHeader("Content-Type", runtime.ContentTypeProtobuf).Body(body.Bytes()), nil
}
