package kubeconn

import (
	"testing"

	"k8s.io/client-go/rest"
)

// Two copies of one config share client-go's transport (and connection);
// a copy passed through Own gets a transport of its own.
func TestOwn(t *testing.T) {
	base := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	transport := func(rc *rest.Config) any {
		t.Helper()
		rt, err := rest.TransportFor(rc)
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	shared := transport(rest.CopyConfig(base))
	if transport(rest.CopyConfig(base)) != shared {
		t.Fatal("two plain copies of a config got different transports: client-go's transport cache changed, the premise of Own")
	}
	own := rest.CopyConfig(base)
	Own(own)
	if got := transport(own); got == shared {
		t.Error("a config passed through Own shares the plain copies' transport")
	}
	other := rest.CopyConfig(base)
	Own(other)
	if transport(other) == transport(own) {
		t.Error("two configs passed through Own share a transport")
	}
}
