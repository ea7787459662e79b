package images

// ContainerdNamespace lets the integration tests (package images_test) open
// containerd where the CRI plugin keeps its images.
const ContainerdNamespace = containerdNamespace
