// Package kubeconn gives the clients built from a client-go rest.Config a
// connection to the API server of their own.
//
// client-go shares one http.Transport (one HTTP/2 connection per server)
// between clients whose TLS settings are equal: its cache
// (k8s.io/client-go/transport/cache.go, tlsConfigKey) keys transports by
// those settings and the dialer holder. rest.Config.TransportConfig wraps a
// set Dial in a new transport.DialHolder for every config it converts, so a
// config with a Dial of its own matches no other client's key and gets a
// transport, hence a connection, of its own. Clients without a Dial share
// one.
package kubeconn

import (
	"net"
	"time"

	"k8s.io/client-go/rest"
)

// Own sets rc's Dial so that the clients built from rc do not share a
// connection with clients built from other configs. The dialer is
// net/http's default one (30s timeout and keep-alive).
func Own(rc *rest.Config) {
	rc.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
}
