package embedding

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

func TestHash(t *testing.T) {
	e, err := NewHash(4096)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := e.Embed(t.Context(), []string{"cat", "black cat", "Black  CAT!", "", "dog"})
	nonzero := func(v []float32) (n int) {
		for _, x := range v {
			if x != 0 {
				n++
			}
		}
		return n
	}
	// one unigram → one coordinate of magnitude 1
	if nonzero(vs[0]) != 1 {
		t.Fatalf("single word: %d non-zero coordinates", nonzero(vs[0]))
	}
	// two unigrams + one bigram, no collision expected in 4096 buckets → each ±1/√3
	for _, x := range vs[1] {
		if x != 0 && math.Abs(math.Abs(float64(x))-1/math.Sqrt(3)) > 1e-7 {
			t.Fatalf("coordinate %v, want ±1/√3", x)
		}
	}
	if c := Cosine(vs[1], vs[2]); math.Abs(c-1) > 1e-6 {
		t.Fatalf("same tokens, cosine %v", c)
	}
	if nonzero(vs[3]) != 0 {
		t.Fatal("empty text has features")
	}
	// "cat" shares one of three features with "black cat": cosine 1/√3
	if c := Cosine(vs[0], vs[1]); math.Abs(c-1/math.Sqrt(3)) > 1e-6 {
		t.Fatalf("cos(cat, black cat) = %v, want 1/√3", c)
	}
	again, _ := e.Embed(t.Context(), []string{"black cat"})
	for i := range again[0] {
		if again[0][i] != vs[1][i] {
			t.Fatal("not deterministic")
		}
	}
}

// fakeOllama serves /api/embed (vector [len(text), 1, 0]).
func fakeOllama(t *testing.T, embedCalls *atomic.Int32) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/embed":
			embedCalls.Add(1)
			var req struct {
				Model string   `json:"model"`
				Input []string `json:"input"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			var out [][]float32
			for _, s := range req.Input {
				out = append(out, []float32{float32(len(s)), 1, 0})
			}
			json.NewEncoder(w).Encode(map[string]any{"model": req.Model, "embeddings": out})
		default:
			http.NotFound(w, r)
		}
	}))
}

func TestOllamaEmbedderBatchesAndCaches(t *testing.T) {
	var calls atomic.Int32
	srv := fakeOllama(t, &calls)
	defer srv.Close()
	cache := t.TempDir()
	e, err := NewOllama(srv.URL, "nomic", 2, cache)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a", "bb", "ccc", "dddd", "eeeee"}
	vs, err := e.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Fatalf("5 texts in batches of 2: %d requests, want 3", calls.Load())
	}
	for i, v := range vs {
		n := float64(len(texts[i]))
		want := []float64{n / math.Sqrt(n*n+1), 1 / math.Sqrt(n*n+1), 0}
		for j := range v {
			if math.Abs(float64(v[j])-want[j]) > 1e-6 {
				t.Fatalf("text %q: got %v, want normalized %v", texts[i], v, want)
			}
		}
	}
	if e.Dim() != 3 || e.Name() != "ollama:nomic" {
		t.Fatalf("dim %d name %s", e.Dim(), e.Name())
	}
	// a fresh embedder on the same cache sends nothing for known texts
	e2, _ := NewOllama(srv.URL, "nomic", 2, cache)
	vs2, err := e2.Embed(t.Context(), []string{"ccc", "a", "new"})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 4 {
		t.Fatalf("after cached call: %d requests, want 4 (only \"new\")", calls.Load())
	}
	for j := range vs2[0] {
		if vs2[0][j] != vs[2][j] {
			t.Fatal("cached vector differs")
		}
	}
	// the cache is keyed by model too
	e3, _ := NewOllama(srv.URL, "other", 2, cache)
	e3.Embed(t.Context(), []string{"a"})
	if calls.Load() != 5 {
		t.Fatalf("other model reused the cache: %d requests", calls.Load())
	}
}

// TestFNV1aMatchesStdlib: the inlined hash is hash/fnv's 64-bit FNV-1a.
func TestFNV1aMatchesStdlib(t *testing.T) {
	for _, s := range []string{"", "u\x00cat", "b\x00black\x00cat"} {
		f := fnv.New64a()
		f.Write([]byte(s))
		if got := fnv1a(fnvOffset, s); got != f.Sum64() {
			t.Fatalf("%q: %x, hash/fnv %x", s, got, f.Sum64())
		}
	}
	if fnv1a(fnv1a(fnvOffset, "b\x00"), "black") != fnv1a(fnvOffset, "b\x00black") {
		t.Fatal("not incremental")
	}
}
