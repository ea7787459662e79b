package cluster

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes the admin kubeconfig (CA and token embedded) to
// Dir/admin.kubeconfig.
func (c *Cluster) writeKubeconfig() error {
	const name = "nodegc-test"
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			name: {Server: c.URL, CertificateAuthorityData: c.pki.caCert},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			"admin": {Token: c.Token},
		},
		Contexts: map[string]*clientcmdapi.Context{
			name: {Cluster: name, AuthInfo: "admin"},
		},
		CurrentContext: name,
	}
	path := c.path("admin.kubeconfig")
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	c.kubeconfig = path
	return nil
}
