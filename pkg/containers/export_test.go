package containers

// The kubelet's label and annotation names, for the integration tests
// (package containers_test), which create pods the way the kubelet does.
const (
	LabelPodUID            = labelPodUID
	AnnotationConfigSource = annotationConfigSource
	AnnotationConfigMirror = annotationConfigMirror
)
