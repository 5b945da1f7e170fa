package evaluate

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/ollama"
	"github.com/himes-rl/himes/trainer"
)

func demoTurn() datasets.Turn {
	rw := "how tall is the eiffel tower"
	return datasets.Turn{ConvID: "c", Turn: 3, Question: "how tall is it", Rewrite: &rw,
		History: []datasets.Message{{Role: "user", Text: "tell me about the eiffel tower"}, {Role: "assistant", Text: "It is in Paris."}, {Role: "user", Text: "who built it"}}}
}

func TestBuiltinRewriters(t *testing.T) {
	ctx := context.Background()
	tn := demoTurn()
	cases := []struct {
		rw   Rewriter
		want string
	}{
		{Raw{}, "how tall is it"},
		{Concat{}, "tell me about the eiffel tower who built it how tall is it"},
		{Gold{}, "how tall is the eiffel tower"},
	}
	for _, c := range cases {
		got, err := c.rw.Rewrite(ctx, tn)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.rw.Name(), got, err, c.want)
		}
	}
	tn.Rewrite = nil
	if _, err := (Gold{}).Rewrite(ctx, tn); !errors.Is(err, ErrNoGoldRewrite) {
		t.Errorf("gold without a rewrite: %v", err)
	}
}

func render(_ context.Context, t datasets.Turn) (trainer.Prompt, error) {
	return trainer.Prompt{Text: "rewrite: " + t.Question,
		Messages: []trainer.Message{{Role: "system", Content: "rewrite"}, {Role: "user", Content: t.Question}}}, nil
}

// samplePolicy is a trainer.Policy whose Sample echoes the request back.
type samplePolicy struct {
	trainer.Policy // other methods unused: calling one panics
	got            trainer.SampleRequest
}

func (p *samplePolicy) Sample(_ context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	p.got = req
	return trainer.SampleResponse{Samples: []trainer.Sample{{Text: "  eiffel tower height \n"}}}, nil
}

func TestPolicyRewriterIsGreedyOnTheTrainingPrompt(t *testing.T) {
	pol := &samplePolicy{}
	rw := Policy{Policy: pol, Render: render, MaxTokens: 32, Seed: 7}
	got, err := rw.Rewrite(context.Background(), demoTurn())
	if err != nil || got != "eiffel tower height" {
		t.Fatalf("got %q, %v", got, err)
	}
	r := pol.got
	if r.Temperature != 0 || r.N != 1 || r.MaxTokens != 32 || len(r.Prompts) != 1 || r.Prompts[0].ID != "c#3" || r.Prompts[0].Text != "rewrite: how tall is it" {
		t.Fatalf("request %+v", r)
	}
	if rw.Name() != "policy" {
		t.Fatalf("name %q", rw.Name())
	}
}

func TestOllamaRewriterChats(t *testing.T) {
	var req map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/chat" {
			http.NotFound(w, r)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"model": "m", "done": true,
			"message": map[string]any{"role": "assistant", "content": " the eiffel tower's height "}})
	}))
	defer srv.Close()
	o, err := NewOllama("qwen:0.5b", srv.URL, render, ollama.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	got, err := o.Rewrite(context.Background(), demoTurn())
	if err != nil || got != "the eiffel tower's height" {
		t.Fatalf("got %q, %v", got, err)
	}
	if o.Name() != "ollama:qwen:0.5b" || req["model"] != "qwen:0.5b" || req["stream"] != false {
		t.Fatalf("name %q, request %v", o.Name(), req)
	}
	msgs, _ := req["messages"].([]any)
	opts, _ := req["options"].(map[string]any)
	if len(msgs) != 2 || opts["temperature"] != float64(0) {
		t.Fatalf("messages %v options %v", msgs, opts)
	}
	if _, err := NewOllama("", srv.URL, render, ollama.DefaultPolicy); err == nil {
		t.Fatal("want an error for an empty model")
	}
}

// The rewriter's calls take the timeout and retry count they are given (himes
// eval passes rollout.ollama's), not a fixed one: a server slower than the
// timeout fails after exactly 1 + Retries attempts.
func TestOllamaRewriterUsesTheGivenCallPolicy(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select { // slower than any timeout below; released when the test ends
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	pol := ollama.DefaultPolicy
	pol.Timeout, pol.Retries, pol.BackoffBase, pol.BackoffMax = 20*time.Millisecond, 2, time.Millisecond, time.Millisecond
	o, err := NewOllama("m", srv.URL, render, pol)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Rewrite(context.Background(), demoTurn()); err == nil {
		t.Fatal("a server slower than the timeout: want an error")
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("%d attempts, want 1 + %d retries", got, pol.Retries)
	}
}
