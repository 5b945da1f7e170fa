package rollout

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/retrieval"
)

func testOllamaCfg(hosts ...string) OllamaConfig {
	c := DefaultConfig().Ollama
	c.Model = "tiny"
	c.Hosts = hosts
	c.Call.BackoffBase = time.Millisecond
	c.Call.BackoffMax = 4 * time.Millisecond
	return c
}

func newTestOllama(t *testing.T, cfg OllamaConfig) *Ollama {
	t.Helper()
	o, err := NewOllama(cfg, DefaultConfig().Prompt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	return o
}

var testChunks = []retrieval.Ranked{
	{Chunk: retrieval.Chunk{ID: "p1#0", Title: "Eiffel Tower", Text: "The tower is 330 m tall."}, Score: 2},
	{Chunk: retrieval.Chunk{ID: "p2#0", Text: "Paris is in France."}, Score: 1},
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestOllamaRequestShape(t *testing.T) {
	f := newFakeOllama(t, 4, 0, "tiny:latest")
	cfg := testOllamaCfg(f.url())
	cfg.NumThread = 1
	o := newTestOllama(t, cfg)
	if err := o.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	ans, err := o.Respond(t.Context(), "How tall is it?", testChunks)
	if err != nil {
		t.Fatal(err)
	}
	if ans != "answer: Answer:" {
		t.Errorf("answer %q", ans)
	}
	req := f.lastRequest()
	if req["model"] != "tiny" || req["stream"] != false || req["keep_alive"] != "30m0s" {
		t.Errorf("request %v", req)
	}
	// think:false must be on the wire, not omitted.
	if v, ok := req["think"]; !ok || v != false {
		t.Errorf("think = %v (present %v), want an explicit false", v, ok)
	}
	opts := req["options"].(map[string]any)
	want := map[string]float64{"temperature": 0, "seed": 42, "num_predict": 128, "num_ctx": 4096, "num_thread": 1}
	for k, v := range want {
		if got, ok := opts[k].(float64); !ok || got != v {
			t.Errorf("option %s = %v, want %v", k, opts[k], v)
		}
	}
	msgs := req["messages"].([]any)
	if len(msgs) != 2 || msgs[0].(map[string]any)["role"] != "system" {
		t.Fatalf("messages %v", msgs)
	}
	user := msgs[1].(map[string]any)["content"].(string)
	wantUser := "Passages:\n[1] Eiffel Tower: The tower is 330 m tall.\n[2] Paris is in France.\n\nQuestion: How tall is it?\nAnswer:"
	if user != wantUser {
		t.Errorf("user message\n%q\nwant\n%q", user, wantUser)
	}
	if !strings.Contains(o.Name(), "tiny@") || !strings.Contains(o.Name(), "num_ctx=4096") {
		t.Errorf("name %q lacks the model digest or options", o.Name())
	}
	embs, err := o.Embed(t.Context(), []string{"ab", "abcd"})
	if err != nil || len(embs) != 2 || embs[1][0] != 4 {
		t.Errorf("embed %v %v", embs, err)
	}
}

// An Ollama 200 without "message" (124 such rollouts were once scored as
// empty answers and cached) is a failed rollout of kind malformed: not
// scored, not cached, asked again at the next step.
func TestOllamaMalformedReplyIsFailedRollout(t *testing.T) {
	f := newFakeOllama(t, 4, 0, "tiny:latest")
	f.malformed = func(prompt string) bool { return strings.Contains(prompt, "text about broken") }
	cfg := DefaultConfig()
	cfg.Responder, cfg.Ollama = "ollama", testOllamaCfg(f.url())
	resp, err := NewResponder(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.(*Ollama).Close()
	sc := &fakeScorer{}
	r := newTestRunner(t, cfg, &fakeRetriever{}, resp, sc)
	groups := []Group{group("1", "q", "fine one", "broken two", "fine one", "other three")}
	for step := range 2 {
		before := f.chats.Load()
		recs, st, err := r.Run(t.Context(), step, groups)
		if err != nil {
			t.Fatal(err)
		}
		bad := recs[1]
		if !bad.Failed() || bad.ErrorKind != KindMalformed || bad.Answer != "" || bad.Reward != 0 || bad.CacheHit ||
			!strings.Contains(bad.Error, "no message") {
			t.Errorf("step %d: malformed reply recorded as %+v", step, bad)
		}
		if st.Failed != 1 || recs[0].Failed() || recs[3].Failed() {
			t.Errorf("step %d: stats %+v", step, st)
		}
		// Step 0 asks for the 3 distinct rewrites; step 1 only for the
		// malformed one again (the good answers come from the cache).
		want := int64(3)
		if step == 1 {
			want = 1
		}
		if got := f.chats.Load() - before; got != want {
			t.Errorf("step %d: %d chat calls, want %d (the malformed reply must not be retried within a step nor cached)", step, got, want)
		}
	}
	if sc.calls != 6 {
		t.Errorf("scorer called %d times, want 6 (3 valid rollouts per step; the malformed one never)", sc.calls)
	}
}

func TestNewResponderModelNotFound(t *testing.T) {
	f := newFakeOllama(t, 1, 0, "other")
	cfg := DefaultConfig()
	cfg.Responder = "ollama"
	cfg.Ollama = testOllamaCfg(f.url())
	cfg.Ollama.Model = "absent"
	_, err := NewResponder(t.Context(), cfg)
	want := "model absent not found on host " + f.url() + " — run `ollama pull absent`"
	var nf *ModelNotFoundError
	if !errors.As(err, &nf) || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	// A second, healthy host does not hide a missing model on the first.
	g := newFakeOllama(t, 1, 0, "absent")
	cfg.Ollama.Hosts = []string{g.url(), f.url()}
	if _, err := NewResponder(t.Context(), cfg); !errors.As(err, &nf) || nf.Host != f.url() {
		t.Errorf("two hosts: err = %v, want not found on %s", err, f.url())
	}
	// An unreachable host fails start-up with a hint, not a 404.
	cfg.Ollama.Hosts = []string{deadAddr(t)}
	cfg.Ollama.Call.Retries = 1
	if _, err := NewResponder(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("dead host: err = %v", err)
	}
}

func TestOllamaRetryPolicy(t *testing.T) {
	cases := []struct {
		name       string
		status     func(n int64) int
		wantErr    string // error kind, "" for success
		wantCalls  int64
		wantAnswer bool
	}{
		{"503 twice then ok", func(n int64) int { return map[bool]int{true: 503, false: 200}[n <= 2] }, "", 3, true},
		{"502 then ok", func(n int64) int { return map[bool]int{true: 502, false: 200}[n <= 1] }, "", 2, true},
		{"429 then ok", func(n int64) int { return map[bool]int{true: 429, false: 200}[n <= 1] }, "", 2, true},
		{"500 always", func(int64) int { return 500 }, KindUnavailable, 4, false},
		{"400 is not retried", func(int64) int { return 400 }, KindRejected, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeOllama(t, 2, 0, "tiny")
			f.status = c.status
			cfg := testOllamaCfg(f.url())
			cfg.Call.Retries = 3
			o := newTestOllama(t, cfg)
			ans, err := o.Respond(t.Context(), "q", testChunks)
			if got := f.chats.Load(); got != c.wantCalls {
				t.Errorf("server saw %d calls, want %d", got, c.wantCalls)
			}
			if c.wantErr == "" {
				if err != nil || ans == "" {
					t.Errorf("answer %q, err %v", ans, err)
				}
				return
			}
			var ce *CallError
			if !errors.As(err, &ce) || ce.Kind != c.wantErr || int64(ce.Attempts) != c.wantCalls {
				t.Errorf("err = %#v, want kind %s after %d attempts", err, c.wantErr, c.wantCalls)
			}
		})
	}
}

func TestOllama404IsNeverRetried(t *testing.T) {
	f := newFakeOllama(t, 2, 0, "other")
	o := newTestOllama(t, testOllamaCfg(f.url()))
	_, err := o.Respond(t.Context(), "q", testChunks)
	var nf *ModelNotFoundError
	if !errors.As(err, &nf) || f.chats.Load() != 1 {
		t.Errorf("err = %v after %d calls; want ModelNotFoundError after 1", err, f.chats.Load())
	}
	if errorKind(err) != KindNotFound || !isFatal(err) {
		t.Errorf("kind %s, fatal %v", errorKind(err), isFatal(err))
	}
}

func TestOllamaTimeoutAndCancel(t *testing.T) {
	f := newFakeOllama(t, 8, time.Second, "tiny")
	cfg := testOllamaCfg(f.url())
	cfg.Call.Timeout = 20 * time.Millisecond
	cfg.Call.Retries = 1
	o := newTestOllama(t, cfg)
	_, err := o.Respond(t.Context(), "q", testChunks)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Kind != KindTimeout || ce.Attempts != 2 {
		t.Errorf("err = %v, want a timeout after 2 attempts", err)
	}

	cfg.Call.Timeout = time.Minute
	o = newTestOllama(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := o.Respond(ctx, "q", testChunks)
		done <- err
	}()
	for f.inflight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: err = %v", err)
	}
}

func TestOllamaRoutingAndFailover(t *testing.T) {
	a := newFakeOllama(t, 16, 20*time.Millisecond, "tiny")
	b := newFakeOllama(t, 16, 20*time.Millisecond, "tiny")
	cfg := testOllamaCfg(a.url(), b.url())
	cfg.HostLimits = []int{1, 3}
	o := newTestOllama(t, cfg)
	if o.Capacity() != 4 {
		t.Errorf("capacity %d", o.Capacity())
	}
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for range 24 {
		wg.Go(func() {
			_, err := o.Respond(t.Context(), "q", testChunks)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if a.peak.Load() > 1 || b.peak.Load() > 3 {
		t.Errorf("per-host limits exceeded: peaks %d and %d, limits 1 and 3", a.peak.Load(), b.peak.Load())
	}
	if a.served.Load() == 0 || b.served.Load() == 0 || a.served.Load()+b.served.Load() != 24 {
		t.Errorf("served %d + %d, want both used and 24 in all", a.served.Load(), b.served.Load())
	}

	// A dead first host: calls fail over to the live one.
	live := newFakeOllama(t, 4, 0, "tiny")
	cfg = testOllamaCfg(deadAddr(t), live.url())
	o = newTestOllama(t, cfg)
	for range 6 {
		if _, err := o.Respond(t.Context(), "q", testChunks); err != nil {
			t.Fatalf("failover: %v", err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c *Config){
		"responder":            func(c *Config) { c.Responder = "gpt" },
		"concurrency":          func(c *Config) { c.Concurrency = 0 },
		"cache_size":           func(c *Config) { c.CacheSize = -1 },
		"extractive.max_words": func(c *Config) { c.Extractive.MaxWords = 0 },
		"prompt":               func(c *Config) { c.Prompt.User = "{{.Nope}}" },
		"ollama.model":         func(c *Config) { c.Responder = "ollama" },
		"ollama.host_limits":   func(c *Config) { c.Responder = "ollama"; c.Ollama.Model = "m"; c.Ollama.HostLimits = []int{1} },
		"ollama.hosts":         func(c *Config) { c.Responder = "ollama"; c.Ollama.Model = "m"; c.Ollama.Hosts = []string{"ftp://x"} },
		"ollama.keep_alive":    func(c *Config) { c.Responder = "ollama"; c.Ollama.Model = "m"; c.Ollama.KeepAlive = "soon" },
		"ollama.timeout":       func(c *Config) { c.Responder = "ollama"; c.Ollama.Model = "m"; c.Ollama.Call.Timeout = 0 },
		"openai.base_urls":     func(c *Config) { c.Responder = "openai"; c.OpenAI.Model = "m" },
	}
	for field, mutate := range cases {
		c := DefaultConfig()
		mutate(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), field) {
			t.Errorf("%s: err = %v", field, err)
		}
	}
}
