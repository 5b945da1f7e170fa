package embedding

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
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

// fakeModel is a model the fake server has: its digest and capabilities.
type fakeModel struct {
	digest string
	caps   []string
}

// fakeModels is the fake server's model list; set changes it between calls.
type fakeModels struct {
	mu sync.Mutex
	m  map[string]fakeModel
}

func (f *fakeModels) set(name string, m fakeModel) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[name] = m
}

// fakeOllama serves /api/embed (vector [len(text), 1, 0]), /api/show and
// /api/tags for the models in fm (nil: "nomic" and "other", both
// embedding models).
func fakeOllama(t *testing.T, embedCalls *atomic.Int32, fm *fakeModels) *httptest.Server {
	t.Helper()
	if fm == nil {
		fm = &fakeModels{m: map[string]fakeModel{"nomic": {"d1", []string{"embedding"}}, "other": {"d2", []string{"embedding"}}}}
	}
	lookup := func(name string) (fakeModel, bool) {
		fm.mu.Lock()
		defer fm.mu.Unlock()
		m, ok := fm.m[strings.TrimSuffix(name, ":latest")]
		return m, ok
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/tags":
			var list []map[string]string
			fm.mu.Lock()
			for name, m := range fm.m {
				list = append(list, map[string]string{"name": name + ":latest", "model": name + ":latest", "digest": m.digest})
			}
			fm.mu.Unlock()
			json.NewEncoder(w).Encode(map[string]any{"models": list})
		case "/api/show":
			var req struct {
				Model string `json:"model"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			m, ok := lookup(req.Model)
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprintf(w, `{"error":"model '%s' not found"}`, req.Model)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"capabilities": m.caps,
				"model_info": map[string]any{"general.architecture": "llama"}})
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
	models := &fakeModels{m: map[string]fakeModel{"nomic": {"d1", []string{"embedding"}}, "other": {"d2", []string{"embedding"}}}}
	srv := fakeOllama(t, &calls, models)
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
	if fp, err := e.Fingerprint(t.Context()); err != nil || fp != "ollama:nomic@d1" {
		t.Fatalf("fingerprint %q, %v; want ollama:nomic@d1", fp, err)
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
	// and by the model's digest: the same name re-created (new weights) is
	// embedded afresh, never served the old model's vectors
	models.set("nomic", fakeModel{"d3", []string{"embedding"}})
	e4, _ := NewOllama(srv.URL, "nomic", 2, cache)
	e4.Embed(t.Context(), []string{"a"})
	if calls.Load() != 6 {
		t.Fatalf("re-created model reused the old digest's cache: %d requests, want 6", calls.Load())
	}
}

// A chat model is refused before any vector is computed or cached: its
// /api/embed output is not a sentence embedding.
func TestOllamaEmbedderRefusesChatModel(t *testing.T) {
	var calls atomic.Int32
	srv := fakeOllama(t, &calls, &fakeModels{m: map[string]fakeModel{"llama3": {"d9", []string{"completion"}}}})
	defer srv.Close()
	cache := t.TempDir()
	e, _ := NewOllama(srv.URL, "llama3", 2, cache)
	_, err := e.Embed(t.Context(), []string{"a"})
	if !errors.Is(err, ErrNotEmbeddingModel) || !strings.Contains(err.Error(), "llama3") {
		t.Fatalf("chat model: %v, want ErrNotEmbeddingModel naming llama3", err)
	}
	if calls.Load() != 0 {
		t.Fatalf("%d /api/embed calls for a refused model", calls.Load())
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("cache written for a refused model: %v", ents)
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

// SetThreads sends num_thread with every embed request; 0 sends no option
// (the server's default); a negative count is refused.
func TestOllamaEmbedderThreads(t *testing.T) {
	var calls atomic.Int32
	srv := fakeOllama(t, &calls, nil)
	defer srv.Close()
	var mu sync.Mutex
	var seen []string // the options of each /api/embed request, as JSON
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/api/embed" {
			var req struct {
				Options json.RawMessage `json:"options"`
			}
			json.Unmarshal(body, &req)
			mu.Lock()
			seen = append(seen, string(req.Options))
			mu.Unlock()
		}
		out, err := http.Post(srv.URL+r.URL.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer out.Body.Close()
		w.WriteHeader(out.StatusCode)
		io.Copy(w, out.Body)
	}))
	defer proxy.Close()
	for _, threads := range []int{1, 0} {
		e, err := NewOllama(proxy.URL, "nomic", 8, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := e.SetThreads(threads); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Embed(t.Context(), []string{"a"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 2 || seen[0] != `{"num_thread":1}` || (seen[1] != "" && seen[1] != "null") {
		t.Errorf("options sent %q; want num_thread 1, then none", seen)
	}
	e, _ := NewOllama(proxy.URL, "nomic", 8, "")
	if err := e.SetThreads(-1); err == nil {
		t.Error("threads -1 accepted")
	}
}

// Prefetch embeds each distinct text once, in batches; later calls one
// text at a time are answered from memory (no disk cache here) with the
// same vectors.
func TestOllamaEmbedderPrefetchThenSingles(t *testing.T) {
	var calls atomic.Int32
	srv := fakeOllama(t, &calls, nil)
	defer srv.Close()
	e, err := NewOllama(srv.URL, "nomic", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"a", "bb", "a", "ccc", "bb", "dddd"} // 4 distinct
	want, err := e.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 {
		t.Fatalf("4 distinct texts in batches of 2: %d requests, want 2", calls.Load())
	}
	if !slices.Equal(want[0], want[2]) || !slices.Equal(want[1], want[4]) {
		t.Fatal("a repeated text got another vector")
	}
	f, _ := NewOllama(srv.URL, "nomic", 2, "")
	if err := f.Prefetch(t.Context(), texts); err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	for i, s := range texts {
		v, err := f.Embed(t.Context(), []string{s})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(v[0], want[i]) {
			t.Errorf("%q: prefetched vector %v, want %v", s, v[0], want[i])
		}
	}
	if calls.Load() != before {
		t.Errorf("%d requests after prefetching, want none", calls.Load()-before)
	}
}

// A cached vector with a NaN (a damaged file) is not served: the text is
// embedded again and its cache entry rewritten, as for any unreadable entry.
func TestOllamaEmbedderReembedsANaNCacheEntry(t *testing.T) {
	var calls atomic.Int32
	srv := fakeOllama(t, &calls, nil)
	defer srv.Close()
	cache := t.TempDir()
	e, err := NewOllama(srv.URL, "nomic", 8, cache)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Embed(t.Context(), []string{"abc"})
	if err != nil {
		t.Fatal(err)
	}
	digest, err := e.ready(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	path := e.cachePath(digest, "abc")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(b[4:], math.Float32bits(float32(math.Inf(1))))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readVec(path); err == nil || !strings.Contains(err.Error(), "value 1 of 3 is +Inf") {
		t.Fatalf("readVec of the damaged entry: %v", err)
	}
	e2, _ := NewOllama(srv.URL, "nomic", 8, cache)
	got, err := e2.Embed(t.Context(), []string{"abc"})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 2 || !slices.Equal(got[0], want[0]) {
		t.Fatalf("after the damaged entry: %d requests (want 2), vector %v (want %v)", calls.Load(), got[0], want[0])
	}
	if v, err := readVec(path); err != nil || !slices.Equal(v, want[0]) {
		t.Fatalf("the entry was not rewritten: %v, %v", v, err)
	}
}
