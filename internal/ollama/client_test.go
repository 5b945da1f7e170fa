package ollama

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/himes-rl/himes/internal/httpcall"
)

func fastPolicy() httpcall.Policy {
	return httpcall.Policy{Timeout: 200 * time.Millisecond, Retries: 2, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond}
}

func newClient(t *testing.T, h http.HandlerFunc) (*Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New([]string{srv.URL}, 2, nil, fastPolicy(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &calls
}

// A 200 without "message" is a malformed response, never an empty answer,
// and it is not retried (the server answered).
func TestChatWithoutMessageIsMalformed(t *testing.T) {
	c, calls := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"model":"m","done":true}`))
	})
	_, err := c.Chat(t.Context(), ChatRequest{ChatRequest: api.ChatRequest{Model: "m"}})
	var ce *httpcall.CallError
	if !errors.As(err, &ce) || ce.Kind != httpcall.KindMalformed {
		t.Fatalf("err = %v, want a CallError of kind %s", err, httpcall.KindMalformed)
	}
	if calls.Load() != 1 {
		t.Errorf("malformed response tried %d times, want 1", calls.Load())
	}
}

// An empty message is a valid (empty) answer: only absence is malformed.
func TestChatEmptyContentIsAnAnswer(t *testing.T) {
	c, _ := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"message":{"role":"assistant","content":""},"done":true}`))
	})
	got, err := c.Chat(t.Context(), ChatRequest{ChatRequest: api.ChatRequest{Model: "m"}})
	if err != nil || got != "" {
		t.Fatalf("got %q, %v; want an empty answer", got, err)
	}
}

func TestEmbedCountMismatchIsMalformed(t *testing.T) {
	c, _ := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"embeddings":[[0.1,0.2]]}`))
	})
	_, err := c.Embed(t.Context(), api.EmbedRequest{Model: "m", Input: []string{"a", "b"}})
	var ce *httpcall.CallError
	if !errors.As(err, &ce) || ce.Kind != httpcall.KindMalformed || !strings.Contains(err.Error(), "1 embeddings for 2 inputs") {
		t.Fatalf("err = %v", err)
	}
}

// A server that never answers times out on every attempt instead of hanging
// (http.DefaultClient has no timeout).
func TestSilentServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	c, calls := newClient(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	_, err := c.Embed(t.Context(), api.EmbedRequest{Model: "m", Input: []string{"a"}})
	var ce *httpcall.CallError
	if !errors.As(err, &ce) || ce.Kind != httpcall.KindTimeout {
		t.Fatalf("err = %v, want a timeout CallError", err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d attempts, want 1 + 2 retries", calls.Load())
	}
}

func TestCheckReportsMissingModel(t *testing.T) {
	c, _ := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"models":[{"name":"other:latest","model":"other:latest","digest":"abc"}]}`))
	})
	_, err := c.Check(t.Context(), "llama3")
	var nf *httpcall.ModelNotFoundError
	if !errors.As(err, &nf) || nf.Hint != "ollama pull llama3" {
		t.Fatalf("err = %v", err)
	}
	c2, _ := newClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"models":[{"name":"llama3:latest","model":"llama3:latest","digest":"d1"}]}`))
	})
	if d, err := c2.Check(t.Context(), "llama3"); err != nil || d != "d1" {
		t.Fatalf("Check = %q, %v", d, err)
	}
}
