package trainer

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Item 5 of issue 27: a restarted remote trainer ended the run under the
// default settings, because the retries ran out before the new process
// listened. A call now waits out refused connections for
// trainer.reconnect_s, whatever trainer.retries says (0 here).
func TestClientWaitsOutATrainerRestart(t *testing.T) {
	serve := func(ln net.Listener) *http.Server {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reply(w, Info{ProtocolVersion: ProtocolVersion, PolicyVersion: 7}, nil)
		})}
		go func() { _ = srv.Serve(ln) }()
		return srv
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	first := serve(ln)
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Retries, cfg.ReconnectSeconds = "http://"+addr, 0, 60
	c, err := Dial(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	WithLogger(discardLogger())(c)
	_ = first.Close() // the trainer goes away...
	restarted := make(chan *http.Server, 1)
	go func() {
		time.Sleep(700 * time.Millisecond) // ...and listens again after a while
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			restarted <- nil
			return
		}
		restarted <- serve(ln)
	}()
	info, err := c.Info(context.Background())
	if srv := <-restarted; srv != nil {
		defer srv.Close()
	}
	if err != nil || info.PolicyVersion != 7 {
		t.Fatalf("info across the restart: %+v, %v", info, err)
	}

	// With reconnect_s 0 only the retries count: a refused call fails.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln2.Addr().String()
	_ = ln2.Close()
	c0 := quietClient("http://"+dead, "", WithRetries(0))
	if _, err := c0.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("reconnect 0: got %v, want connection refused", err)
	}
	// A deadline that passes fails with a message naming trainer.reconnect_s.
	c1 := quietClient("http://"+dead, "", WithRetries(0), WithReconnect(300*time.Millisecond))
	if _, err := c1.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "trainer.reconnect_s") {
		t.Fatalf("expired reconnect: got %v, want an error naming trainer.reconnect_s", err)
	}
}
