package rollout

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/ollama"
)

// fakeOllama is an in-process Ollama-compatible server: /api/tags,
// /api/chat and /api/embed, with a fixed service time and a number of
// slots, like a server with OLLAMA_NUM_PARALLEL = slots. Requests beyond
// slots + maxQueue get Ollama's 503 (when maxQueue > 0).
//
// Service runs on a virtual timeline: a request takes the slot that frees
// first and finishes exactly service after max(arrival, that slot's previous
// finish), the way a GPU works through its batch regardless of when the Go
// scheduler wakes the handler. So the server's capacity is exactly
// slots/service and any shortfall is the client's (or the network's).
type fakeOllama struct {
	srv      *httptest.Server
	models   []string
	nslots   int
	service  time.Duration
	maxQueue int64
	nextFree []time.Time // per slot, guarded by mu

	pending  atomic.Int64 // waiting or running
	chats    atomic.Int64 // chat requests received
	served   atomic.Int64 // chat requests answered 200
	busy     atomic.Int64 // 503s sent
	inflight atomic.Int64
	peak     atomic.Int64

	// status, when set, may override the reply to the n-th chat request (1-based).
	status func(n int64) int
	// malformed, when set, picks prompts (the last message) answered 200
	// without a "message".
	malformed func(prompt string) bool

	mu   sync.Mutex
	last map[string]any // body of the last chat request
}

func newFakeOllama(t testing.TB, slots int, service time.Duration, models ...string) *fakeOllama {
	f := &fakeOllama{models: models, nslots: slots, nextFree: make([]time.Time, slots), service: service}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/tags", f.tags)
	mux.HandleFunc("POST /api/chat", f.chat)
	mux.HandleFunc("POST /api/embed", f.embed)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeOllama) url() string { return f.srv.URL }

func (f *fakeOllama) known(m string) bool {
	for _, k := range f.models {
		if ollama.SameModel(k, m) {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeOllama) tags(w http.ResponseWriter, _ *http.Request) {
	var ms []map[string]any
	for _, m := range f.models {
		ms = append(ms, map[string]any{"name": m, "model": m, "digest": fmt.Sprintf("%064x", len(m))})
	}
	writeJSON(w, 200, map[string]any{"models": ms})
}

func (f *fakeOllama) chat(w http.ResponseWriter, r *http.Request) {
	n := f.chats.Add(1)
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	f.mu.Lock()
	f.last = body
	f.mu.Unlock()
	model, _ := body["model"].(string)
	if !f.known(model) {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model %q not found, try pulling it first", model)})
		return
	}
	if f.status != nil {
		if s := f.status(n); s != 200 {
			writeJSON(w, s, map[string]string{"error": http.StatusText(s)})
			return
		}
	}
	if p := f.pending.Add(1); f.maxQueue > 0 && p > int64(f.nslots)+f.maxQueue {
		f.pending.Add(-1)
		f.busy.Add(1)
		writeJSON(w, 503, map[string]string{"error": "server busy, please try again.  maximum pending requests exceeded"})
		return
	}
	defer f.pending.Add(-1)
	in := f.inflight.Add(1)
	for p := f.peak.Load(); in > p && !f.peak.CompareAndSwap(p, in); p = f.peak.Load() {
	}
	finish := f.book()
	t := time.NewTimer(time.Until(finish))
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
		f.inflight.Add(-1)
		return
	}
	f.inflight.Add(-1)
	msgs, _ := body["messages"].([]any)
	last := ""
	if len(msgs) > 0 {
		m, _ := msgs[len(msgs)-1].(map[string]any)
		last, _ = m["content"].(string)
	}
	if f.malformed != nil && f.malformed(last) {
		writeJSON(w, 200, map[string]any{"model": model, "done": true})
		return
	}
	// The answer is a function of the prompt, like a frozen model at temperature 0.
	answer := "answer: " + lastLine(last)
	f.served.Add(1)
	writeJSON(w, 200, map[string]any{"model": model, "message": map[string]string{"role": "assistant", "content": answer}, "done": true})
}

// book reserves the earliest-free slot and returns when the request finishes.
func (f *fakeOllama) book() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for k := range f.nextFree {
		if f.nextFree[k].Before(f.nextFree[i]) {
			i = k
		}
	}
	start := time.Now()
	if f.nextFree[i].After(start) {
		start = f.nextFree[i]
	}
	f.nextFree[i] = start.Add(f.service)
	return f.nextFree[i]
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func (f *fakeOllama) embed(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	var out [][]float32
	for _, in := range body.Input {
		out = append(out, []float32{float32(len(in)), 1})
	}
	writeJSON(w, 200, map[string]any{"model": body.Model, "embeddings": out})
}

func (f *fakeOllama) lastRequest() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}
