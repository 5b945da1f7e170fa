package memory

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/internal/ollamatest"
)

func TestOllamaClassifierUsesSchema(t *testing.T) {
	tax, _ := DefaultTaxonomy()
	var format atomic.Value
	srv := fakeChat(t, `{"label": "home/repair"}`, &format)
	defer srv.Close()
	c, err := NewOllamaClassifier(srv.URL, "llama", tax)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Classify(t.Context(), []string{"garage door broke"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != (Label{"home", "repair"}) {
		t.Fatalf("got %v", got[0])
	}
	var schema struct {
		Properties struct {
			Label struct {
				Enum []string `json:"enum"`
			} `json:"label"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(format.Load().(string)), &schema); err != nil {
		t.Fatalf("format is not a JSON schema: %v", err)
	}
	if len(schema.Properties.Label.Enum) != len(tax.Labels()) || !strings.Contains(strings.Join(schema.Properties.Label.Enum, ","), "home/repair") {
		t.Fatalf("schema enum %v", schema.Properties.Label.Enum)
	}
	bad := fakeChat(t, `{"label": "cooking/space"}`, nil)
	defer bad.Close()
	c2, _ := NewOllamaClassifier(bad.URL, "llama", tax)
	if _, err := c2.Classify(t.Context(), []string{"x"}, nil); err == nil {
		t.Fatal("label outside the taxonomy accepted")
	}
}

func TestRealOllamaClassifier(t *testing.T) {
	s := ollamatest.Start(t)
	tax, err := DefaultTaxonomy()
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewOllamaClassifier(s.URL(), ollamatest.Model, tax)
	if err != nil {
		t.Fatal(err)
	}
	// The format schema constrains even a random model to a taxonomy label.
	labels, err := c.Classify(context.Background(), []string{"how do I fix a leaking tap"}, nil)
	if err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, s.Log())
	}
	if len(labels) != 1 || !tax.Has(labels[0]) {
		t.Errorf("labels %v", labels)
	}
}

// fakeChat serves Ollama's /api/chat with a fixed reply and records the
// request's format (the JSON schema).
func fakeChat(t *testing.T, reply string, lastFormat *atomic.Value) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/chat" {
			http.NotFound(w, r)
			return
		}
		var req map[string]json.RawMessage
		json.NewDecoder(r.Body).Decode(&req)
		if lastFormat != nil {
			lastFormat.Store(string(req["format"]))
		}
		json.NewEncoder(w).Encode(map[string]any{"model": "m", "done": true,
			"message": map[string]string{"role": "assistant", "content": reply}})
	}))
}
