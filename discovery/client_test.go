package discovery

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Every lookup, the dependency wait's included, goes over one HTTP/2
// connection to a TLS server that speaks both protocols (as kube-apiserver
// does). An HTTP/1.1 wait was measured and dropped (docs/scale.md): its
// connection closes with each watch it stops, so the lookup that takes the
// turn next dials and handshakes again, and a mass restart's exits came
// several hundred milliseconds later for a few MiB of API-server RSS.
func TestLookupsShareOneHTTP2Connection(t *testing.T) {
	var mu sync.Mutex
	protos := map[string]string{} // path -> protocol
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.URL.Path] = r.Proto
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}`))
	}))
	srv.EnableHTTP2 = true
	var conns sync.Map // net.Conn -> struct{}
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Store(c, struct{}{})
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	k, err := NewKube(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := k.in(endpointSlicesGVR, "a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake serves no Table: only the request's protocol counts here.
	_, _ = k.jobs("b", nil).List(ctx, metav1.ListOptions{})
	if _, err := k.in(podsGVR, "c").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, path := range []string{
		"/apis/discovery.k8s.io/v1/namespaces/a/endpointslices",
		"/apis/batch/v1/namespaces/b/jobs",
		"/api/v1/namespaces/c/pods",
	} {
		if got := protos[path]; got != "HTTP/2.0" {
			t.Errorf("%s: %q, want HTTP/2.0", path, got)
		}
	}
	mu.Unlock()
	n := 0
	conns.Range(func(_, _ any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}
