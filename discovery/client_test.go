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

// The dependency wait's requests go over HTTP/1.1, every other over HTTP/2,
// to a TLS server that speaks both (as kube-apiserver does); and the wait's
// idle connections are closed when it ends.
func TestWaitSpeaksHTTP1(t *testing.T) {
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
	var conns sync.Map // net.Conn -> its last state
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) { conns.Store(c, s) }
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	k, err := NewKube(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := k.inVia(k.wait, endpointSlicesGVR, "a").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fake serves no Table: only the request's protocol counts here.
	_, _ = k.jobsVia(k.wait, "b", nil).List(ctx, metav1.ListOptions{})
	if _, err := k.in(endpointSlicesGVR, "c").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for path, want := range map[string]string{
		"/apis/discovery.k8s.io/v1/namespaces/a/endpointslices": "HTTP/1.1",
		"/apis/batch/v1/namespaces/b/jobs":                      "HTTP/1.1",
		"/apis/discovery.k8s.io/v1/namespaces/c/endpointslices": "HTTP/2.0",
	} {
		if got := protos[path]; got != want {
			t.Errorf("%s: %q, want %s", path, got, want)
		}
	}
	mu.Unlock()

	count := func(want http.ConnState) (n int) {
		conns.Range(func(_, s any) bool {
			if s.(http.ConnState) == want {
				n++
			}
			return true
		})
		return n
	}
	if n := count(http.StateClosed); n != 0 {
		t.Fatalf("%d connections closed before the wait ended", n)
	}
	k.waitEnded()
	// The server sees the close when it reads EOF; the HTTP/2 one stays.
	eventually(t, "the wait's connection closed", func() bool { return count(http.StateClosed) == 1 })
	if n := count(http.StateIdle); n != 1 {
		t.Errorf("%d idle connections left, want the HTTP/2 one", n)
	}
}

// Inside a wait (it holds the turn) a lookup goes through the wait's
// HTTP/1.1 client; a followed one (a probe's, beside the agent's other
// watches) through the HTTP/2 one.
func TestWaiterConn(t *testing.T) {
	k, err := NewKube(&rest.Config{Host: "https://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &Waiter{cfg: Config{Kube: k}}
	if c := w.conn(withTurnCtx(context.Background())); c.http != k.wait.http {
		t.Error("a wait's lookup is not on the wait's client")
	}
	if c := w.conn(context.Background()); c.http != k.apiConn.http {
		t.Error("a followed lookup is not on the HTTP/2 client")
	}
}
