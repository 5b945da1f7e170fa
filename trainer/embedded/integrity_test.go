package embedded

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/trainer"
)

// post sends a raw JSON body to h and decodes the answer.
func post(t *testing.T, h http.Handler, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: answer %q is not JSON: %v", path, rec.Body.String(), err)
	}
	return rec.Code, out
}

func errorOf(t *testing.T, body map[string]any) (code, message string) {
	t.Helper()
	e, ok := body["error"].(map[string]any)
	if !ok {
		t.Fatalf("no error object in %v", body)
	}
	return e["code"].(string), e["message"].(string)
}

// TestLimitsRefuseBeforeAllocating: the 300-byte request that used to kill
// the server (n = 10^7: a 10^7-element slice of samples) is refused with a
// clear invalid_argument, allocating next to nothing; so are the other
// requests beyond info.limits, and info reports the limits.
func TestLimitsRefuseBeforeAllocating(t *testing.T) {
	e := newTestEmbedded(t, nil)
	h := trainer.NewHandler(e, "")
	info, _ := e.Info(context.Background())
	if want := (trainer.Limits{MaxPrompts: 1024, MaxN: 128, MaxTokens: 64, MaxBatch: 8192}); info.Limits != want {
		t.Fatalf("info.limits %+v, want %+v", info.Limits, want)
	}
	body := `{"prompts": [{"dialogue": {"history": [{"role": "user", "content": "tell me about the bronze age collapse"}], "question": "what caused it?"}}], "n": 10000000, "temperature": 1}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	status, out := post(t, h, "/v1/sample", body)
	runtime.ReadMemStats(&after)
	code, msg := errorOf(t, out)
	if status != http.StatusBadRequest || code != trainer.CodeInvalidArgument || msg != "n: 10000000 samples per prompt, the limit is 128 (info.limits)" {
		t.Fatalf("n = 10^7: %d %s %q", status, code, msg)
	}
	// One Sample is ~100 bytes: honouring the request would take ~1 GB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing n = 10^7 allocated %d bytes", alloc)
	}

	many := func(k int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", k), ",") }
	prompt := `{"text": "what caused it?"}`
	for _, tc := range []struct{ path, body, msg string }{
		{"/v1/sample", `{"prompts": [` + many(1025, prompt) + `]}`, "prompts: 1025 prompts, the limit is 1024"},
		{"/v1/sample", `{"prompts": [` + prompt + `], "max_tokens": 65}`, "max_tokens: 65 tokens, the limit is 64"},
		{"/v1/grpo_step", `{"step_id": "g", "loss": {"type": "grpo", "learning_rate": 0.1}, "samples": [` +
			many(8193, `{"prompt": `+prompt+`, "token_ids": [], "old_logprobs": [], "advantage": 1}`) + `]}`, "samples: 8193 samples, the limit is 8192"},
		{"/v1/sft_step", `{"step_id": "s", "learning_rate": 0.1, "examples": [` + many(8193, `{"prompt": `+prompt+`, "completion": "x"}`) + `]}`,
			"examples: 8193 examples, the limit is 8192"},
		{"/v1/logprobs", `{"items": [` + many(8193, `{"prompt": `+prompt+`, "token_ids": []}`) + `]}`, "items: 8193 items, the limit is 8192"},
	} {
		status, out := post(t, h, tc.path, tc.body)
		code, msg := errorOf(t, out)
		if status != http.StatusBadRequest || code != trainer.CodeInvalidArgument || !strings.HasPrefix(msg, tc.msg) {
			t.Errorf("%s: %d %s %q, want 400 invalid_argument %q", tc.path, status, code, msg, tc.msg)
		}
	}
	if e.st.version != 0 {
		t.Errorf("refused requests moved the policy to version %d", e.st.version)
	}
}

func TestBodyLimitFromContentLength(t *testing.T) {
	h := trainer.NewHandler(newTestEmbedded(t, nil), "", trainer.WithMaxBodyBytes(100))
	status, out := post(t, h, "/v1/sample", `{"prompts": [{"text": "`+strings.Repeat("a", 200)+`"}]}`)
	if code, msg := errorOf(t, out); status != http.StatusRequestEntityTooLarge || code != trainer.CodeInvalidArgument || !strings.Contains(msg, "at most 100") {
		t.Errorf("oversized body: %d %s %q", status, code, msg)
	}
}

// TestVersionPrecondition: a call carrying a stale expected_policy_version
// is refused with version_mismatch (412) and applies nothing; a retry of an
// applied call with the same step_id replays instead of failing, although
// its own first attempt moved the version.
func TestVersionPrecondition(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(trainer.NewHandler(e, ""))
	defer srv.Close()
	c := quietClient(srv.URL, "")
	p := bronze()
	s, err := c.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{p}, N: 1, Temperature: 1, Seed: 1, ExpectedPolicyVersion: trainer.Version(0)})
	if err != nil {
		t.Fatal(err)
	}
	gs := trainer.GRPOSample{Prompt: p, TokenIDs: s.Samples[0].TokenIDs, OldLogprobs: s.Samples[0].Logprobs, Advantage: 1}
	grpo := func(id string, v int64) (trainer.GRPOResponse, error) {
		return c.GRPOStep(ctx, trainer.GRPORequest{StepID: id, Samples: []trainer.GRPOSample{gs}, ExpectedPolicyVersion: trainer.Version(v),
			Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.1), Temperature: new(1.0)}})
	}
	r, err := grpo("a", 0)
	if err != nil || r.PolicyVersion != 1 {
		t.Fatalf("grpo_step at the current version: %+v %v", r, err)
	}
	if r, err := grpo("a", 0); err != nil || !r.Replayed || r.PolicyVersion != 1 {
		t.Fatalf("retry of the applied step: %+v %v, want a replay at version 1", r, err)
	}
	w := e.Weights()
	// A restarted trainer looks like this from the harness: it expects 72.
	checks := []struct {
		what string
		err  error
	}{
		{"sample", second(c.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{p}, ExpectedPolicyVersion: trainer.Version(72)}))},
		{"grpo_step", second(grpo("b", 72))},
		{"sft_step", second(c.SFTStep(ctx, trainer.SFTRequest{StepID: "c", Examples: []trainer.SFTExample{{Prompt: p, Completion: "bronze"}},
			LearningRate: 0.1, ExpectedPolicyVersion: trainer.Version(72)}))},
		{"save", second(c.Save(ctx, trainer.SaveRequest{StepID: "d", Name: "x", ExpectedPolicyVersion: trainer.Version(72)}))},
	}
	for _, ck := range checks {
		var pe *trainer.Error
		if !errors.As(ck.err, &pe) || pe.Code != trainer.CodeVersionMismatch || pe.Status != http.StatusPreconditionFailed || pe.Retryable ||
			!strings.Contains(pe.Message, "expected_policy_version 72, but the policy is at version 1") {
			t.Errorf("%s with a stale version: %v, want a 412 non-retryable version_mismatch", ck.what, ck.err)
		}
	}
	if e.st.version != 1 || fmt.Sprint(e.Weights()) != fmt.Sprint(w) {
		t.Errorf("refused calls changed the policy (version %d)", e.st.version)
	}
	if list, _ := e.Checkpoints(ctx); len(list) != 0 {
		t.Errorf("a refused save wrote %v", list)
	}
	// A refused call is not remembered: its step_id with the right version applies.
	if r, err := grpo("b", 1); err != nil || r.Replayed || r.PolicyVersion != 2 {
		t.Errorf("step_id of a refused call, now at the right version: %+v %v", r, err)
	}
	if _, err := c.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{p}, ExpectedPolicyVersion: trainer.Version(-1)}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
		t.Errorf("negative expected_policy_version: %v", err)
	}
}

// TestSharedCheckpointDirRunIDs: two runs share one trainer checkpoint
// directory (two trainers, or one trainer serving both). B cannot load A's
// checkpoint when it names its own run id, and the listing and load report
// whose checkpoint it is.
func TestSharedCheckpointDirRunIDs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = dir
	a, _ := New(cfg, nil)
	b, _ := New(cfg, nil)
	if _, err := a.SFTStep(ctx, trainer.SFTRequest{StepID: "s", Examples: []trainer.SFTExample{{Prompt: bronze(), Completion: "bronze age"}}, LearningRate: 0.5}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Save(ctx, trainer.SaveRequest{StepID: "save", Name: "run-a-step-000001", RunID: "aaaa"}); err != nil {
		t.Fatal(err)
	}
	list, err := b.Checkpoints(ctx)
	if err != nil || len(list) != 1 || list[0].RunID != "aaaa" {
		t.Fatalf("listing: %+v %v", list, err)
	}
	bw := b.Weights()
	_, err = b.Load(ctx, trainer.LoadRequest{StepID: "l", Name: "run-a-step-000001", ExpectedRunID: "bbbb"})
	if trainer.ErrorCode(err) != trainer.CodeRunMismatch || !strings.Contains(err.Error(), `saved by run "aaaa", not "bbbb"`) {
		t.Fatalf("B loading A's checkpoint: %v, want run_mismatch", err)
	}
	if b.st.version != 0 || fmt.Sprint(b.Weights()) != fmt.Sprint(bw) {
		t.Errorf("the refused load changed B's policy")
	}
	ld, err := b.Load(ctx, trainer.LoadRequest{StepID: "l2", Name: "run-a-step-000001", ExpectedRunID: "aaaa"})
	if err != nil || ld.RunID != "aaaa" || ld.PolicyVersion != 1 || fmt.Sprint(b.Weights()) != fmt.Sprint(a.Weights()) {
		t.Errorf("load with the owner's run id: %+v %v", ld, err)
	}
}

// TestCheckpointChecksum: an edited weight in an otherwise valid checkpoint
// file is refused with checkpoint_corrupt naming the checksum, and the policy
// is unchanged; a format /1 file (no checksum) still loads.
func TestCheckpointChecksum(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	if _, err := e.Save(ctx, trainer.SaveRequest{StepID: "s", Name: "ck", RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.cfg.CheckpointDir, "ck.json")
	var doc map[string]any
	raw, _ := os.ReadFile(path)
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["format"] != "himes-embedded-policy/2" || !strings.HasPrefix(doc["checksum"].(string), "sha256:") || doc["run_id"] != "r1" {
		t.Fatalf("checkpoint file: format %v checksum %v run_id %v", doc["format"], doc["checksum"], doc["run_id"])
	}
	for _, edit := range []struct {
		name string
		f    func(map[string]any)
	}{
		{"weight", func(d map[string]any) { d["weights"].([]any)[3] = 2.5 }},
		{"version", func(d map[string]any) { d["policy_version"] = 40 }},
		{"run id", func(d map[string]any) { d["run_id"] = "r2" }},
		{"checksum dropped", func(d map[string]any) { delete(d, "checksum") }},
	} {
		d := map[string]any{}
		_ = json.Unmarshal(raw, &d)
		edit.f(d)
		b, _ := json.Marshal(d)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := e.Load(ctx, trainer.LoadRequest{StepID: "l-" + edit.name, Name: "ck"})
		if trainer.ErrorCode(err) != trainer.CodeCheckpointCorrupt || !strings.Contains(err.Error(), "field checksum") {
			t.Errorf("%s edited: %v, want checkpoint_corrupt on the checksum", edit.name, err)
		}
		if list, _ := e.Checkpoints(ctx); len(list) != 0 {
			t.Errorf("%s edited: a corrupt checkpoint is listed: %+v", edit.name, list)
		}
	}
	if e.st.version != 0 {
		t.Errorf("refused loads changed the policy")
	}
	// A checkpoint of the previous format, written before checksums.
	legacy := map[string]any{}
	_ = json.Unmarshal(raw, &legacy)
	legacy["format"] = "himes-embedded-policy/1"
	legacy["policy_version"] = 5
	delete(legacy, "checksum")
	delete(legacy, "run_id")
	b, _ := json.Marshal(legacy)
	_ = os.WriteFile(path, b, 0o644)
	if ld, err := e.Load(ctx, trainer.LoadRequest{StepID: "legacy", Name: "ck", ExpectedRunID: "r1"}); err != nil || ld.PolicyVersion != 5 || ld.RunID != "" {
		t.Errorf("format /1 checkpoint: %+v %v, want it loaded with run_id \"\"", ld, err)
	}
}

// TestServerClosesSlowBody: a client that sends its headers and then its
// body a byte at a time is disconnected once the server's ReadTimeout is
// spent, instead of holding the connection for as long as it likes.
func TestServerClosesSlowBody(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := trainer.NewServer(trainer.NewHandler(newTestEmbedded(t, nil), ""), trainer.ServerOptions{ReadTimeout: 50 * time.Millisecond})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"prompts": [{"text": "what caused it?"}]}`
	if _, err := fmt.Fprintf(conn, "POST /v1/sample HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5]); err != nil {
		t.Fatal(err)
	}
	// Keep trickling the body; a server without a read timeout waits for
	// it indefinitely. The 10 s bound only keeps a broken server from
	// hanging the test: the configured timeout is 50 ms.
	closed := make(chan []byte, 1)
	go func() {
		got, _ := io.ReadAll(bufio.NewReader(conn))
		closed <- got
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(10 * time.Second)
	for i := 5; ; i++ {
		select {
		case got := <-closed:
			if len(got) > 0 && !bytes.HasPrefix(got, []byte("HTTP/1.1 4")) {
				t.Errorf("the server answered %q to a timed-out body", got)
			}
			return
		case <-giveUp:
			t.Fatal("the server still holds a connection whose body never completes")
		case <-tick.C:
			if i < len(body)-1 { // never send the last byte
				_, _ = conn.Write([]byte{body[i]})
			}
		}
	}
}

// second returns a call's error, for tests that expect one.
func second[T any](_ T, err error) error { return err }
