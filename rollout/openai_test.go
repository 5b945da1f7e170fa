package rollout

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// fakeOpenAI serves /v1/models and /v1/chat/completions, checking the bearer token.
func fakeOpenAI(t *testing.T, token string, busyFirst int) (*httptest.Server, func() map[string]any) {
	var mu sync.Mutex
	var last map[string]any
	calls := 0
	mux := http.NewServeMux()
	auth := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+token {
			writeJSON(w, 401, map[string]any{"error": map[string]string{"message": "bad key"}})
			return false
		}
		return true
	}
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if auth(w, r) {
			writeJSON(w, 200, map[string]any{"data": []map[string]string{{"id": "served-model"}}})
		}
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		if !auth(w, r) {
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		last = body
		calls++
		n := calls
		mu.Unlock()
		if n <= busyFirst {
			writeJSON(w, 503, map[string]any{"error": map[string]string{"message": "overloaded"}})
			return
		}
		writeJSON(w, 200, map[string]any{"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": " 330 m \n"}}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, func() map[string]any { mu.Lock(); defer mu.Unlock(); return last }
}

func TestOpenAIResponder(t *testing.T) {
	srv, last := fakeOpenAI(t, "sekret", 2)
	t.Setenv("HIMES_TEST_KEY", "sekret")
	cfg := DefaultConfig()
	cfg.Responder = "openai"
	cfg.OpenAI.Model = "served-model"
	cfg.OpenAI.BaseURLs = []string{srv.URL + "/v1"}
	cfg.OpenAI.APIKeyEnv = "HIMES_TEST_KEY"
	cfg.OpenAI.Call = testOllamaCfg().Call
	resp, err := NewResponder(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := resp.Respond(t.Context(), "How tall?", testChunks)
	if err != nil || ans != "330 m" {
		t.Fatalf("answer %q, err %v", ans, err)
	}
	req := last()
	if req["model"] != "served-model" || req["temperature"] != 0.0 || req["seed"] != 42.0 || req["max_tokens"] != 128.0 || req["stream"] != false {
		t.Errorf("request %v", req)
	}
	if msgs := req["messages"].([]any); len(msgs) != 2 {
		t.Errorf("messages %v", msgs)
	}

	cfg.OpenAI.Model = "other"
	var nf *ModelNotFoundError
	if _, err := NewResponder(t.Context(), cfg); !errors.As(err, &nf) {
		t.Errorf("absent model: %v", err)
	}
	t.Setenv("HIMES_TEST_KEY", "wrong")
	cfg.OpenAI.Model = "served-model"
	var ce *CallError
	if _, err := NewResponder(t.Context(), cfg); !errors.As(err, &ce) || ce.Kind != KindRejected || ce.Status != 401 {
		t.Errorf("bad key: %v", err)
	}
}
