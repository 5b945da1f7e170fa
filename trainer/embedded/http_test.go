package embedded

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/himes-rl/himes/trainer"
)

func quietClient(url, token string, opts ...trainer.ClientOption) *trainer.Client {
	opts = append([]trainer.ClientOption{trainer.WithBackoff(time.Millisecond, 5*time.Millisecond), trainer.WithLogger(discardLogger())}, opts...)
	return trainer.NewClient(url, token, opts...)
}

// dropProxy forwards TCP connections to backend; the first connection's
// response is swallowed and the connection closed, after the backend has
// started answering (so the request was fully applied): the client sees the
// connection drop after sending.
type dropProxy struct {
	ln      net.Listener
	backend string
	conns   atomic.Int32
	wg      sync.WaitGroup
}

func newDropProxy(t *testing.T, backend string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, backend: backend}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c, p.conns.Add(1) == 1)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *dropProxy) handle(c net.Conn, drop bool) {
	defer c.Close()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer b.Close()
	go func() { _, _ = io.Copy(b, c) }()
	if drop {
		var one [1]byte
		_, _ = b.Read(one[:]) // the backend has applied the call and is answering
		return                // close without forwarding a byte
	}
	_, _ = io.Copy(c, b)
}

func TestIdempotencyUnderDroppedConnection(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	var grpoCalls atomic.Int32
	h := trainer.NewHandler(e, "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/grpo_step" {
			grpoCalls.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	proxy := newDropProxy(t, strings.TrimPrefix(srv.URL, "http://"))

	// A twin policy gets the same update once, directly.
	twin := newTestEmbedded(t, nil)
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 4})
	s := res.Samples[0]
	req := trainer.GRPORequest{StepID: "dropped-1", Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: 1}},
		Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.1)}}
	want, err := twin.GRPOStep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}

	c := quietClient("http://"+proxy.ln.Addr().String(), "", trainer.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	got, err := c.GRPOStep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := grpoCalls.Load(); n != 2 {
		t.Fatalf("the endpoint saw %d grpo_step requests, want 2 (the dropped one and the retry)", n)
	}
	if !got.Replayed || got.PolicyVersion != 1 {
		t.Errorf("retry: replayed %v, policy_version %d; want true and 1", got.Replayed, got.PolicyVersion)
	}
	got.Replayed = false
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(e.Weights(), twin.Weights()) {
		t.Errorf("the update was not applied exactly once: %+v vs %+v", got, want)
	}

	// The same with an auto-generated step_id: the client reuses it on retry.
	req.StepID = ""
	proxy.conns.Store(0)
	c2 := quietClient("http://"+proxy.ln.Addr().String(), "", trainer.WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	got, err = c2.GRPOStep(ctx, req)
	if err != nil || !got.Replayed || got.PolicyVersion != 2 {
		t.Errorf("auto step_id: %+v %v, want replayed at version 2", got, err)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(trainer.NewHandler(e, "sesame"))
	defer srv.Close()

	c := quietClient(srv.URL, "sesame")
	_, err := c.GRPOStep(ctx, trainer.GRPORequest{StepID: "x", Samples: []trainer.GRPOSample{{Prompt: bronze()}}, Loss: trainer.LossConfig{Type: new("x"), LearningRate: new(1.0)}})
	// The client resolves the loss before sending it, so it refuses an
	// unknown type itself; the endpoint's own refusal is in the table below.
	if want := "trainer at " + srv.URL + ": grpo_step: unknown loss type 'x'"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want prefix %q", err, want)
	}
	if trainer.ErrorCode(err) != trainer.CodeUnknownLossType {
		t.Errorf("code %q", trainer.ErrorCode(err))
	}
	_, err = quietClient(srv.URL, "wrong").Info(ctx)
	if trainer.ErrorCode(err) != trainer.CodeUnauthorized {
		t.Errorf("wrong token: %v", err)
	}
	_, err = c.Load(ctx, trainer.LoadRequest{Name: "missing"})
	if trainer.ErrorCode(err) != trainer.CodeNotFound {
		t.Errorf("missing checkpoint: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil || !info.Capabilities.Auth || info.TokenKind != "decisions" {
		t.Errorf("info: %+v %v", info, err)
	}

	for _, tc := range []struct{ method, path, body, code string }{
		{"GET", "/v1/grpo_step", "", trainer.CodeInvalidArgument},
		{"POST", "/v1/nope", "{}", trainer.CodeNotFound},
		{"POST", "/v1/sample", "{not json", trainer.CodeInvalidArgument},
		{"POST", "/v1/sft_step", `{"step_id":"a","examples":[]}`, trainer.CodeInvalidArgument},
		{"POST", "/v1/grpo_step", `{"step_id":"a","samples":[{"prompt":{"text":"q"}}],"loss":{"type":"x","learning_rate":1}}`, trainer.CodeUnknownLossType},
	} {
		r, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		r.Header.Set("Authorization", "Bearer sesame")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		var env struct{ Error trainer.Error }
		_ = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if env.Error.Code != tc.code || resp.StatusCode/100 != 4 {
			t.Errorf("%s %s: status %d code %q, want 4xx %q", tc.method, tc.path, resp.StatusCode, env.Error.Code, tc.code)
		}
	}
}

// TestLossOptionsOverHTTP: the embedded policy advertises dual clip and
// low_var_kl, so the client sends them through the handler.
func TestLossOptionsOverHTTP(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(trainer.NewHandler(e, ""))
	defer srv.Close()
	ce := quietClient(srv.URL, "")
	samp, err := ce.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, N: 2, Temperature: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var gs []trainer.GRPOSample
	for i, s := range samp.Samples {
		gs = append(gs, trainer.GRPOSample{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(2*i - 1)})
	}
	if _, err := ce.GRPOStep(ctx, trainer.GRPORequest{Samples: gs, Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(0.1), ClipRatioC: new(3.0),
		KLEstimator: new(trainer.KLLowVar), KLCoef: new(0.1)}}); err != nil {
		t.Fatalf("embedded policy over HTTP refused dual clip / low_var_kl: %v", err)
	}
}

// TestLossOverHTTP: the handler and the embedded policy read the loss as
// PROTOCOL.md says. A request that omits the loss fields, or sends them as
// null, is applied exactly like one that spells out the documented
// defaults; a given clip_low 0 is applied as 0 (it clips a ratio of 0.9
// with a negative advantage, which the default 0.2 does not); an invalid
// value is a 400 naming the field.
func TestLossOverHTTP(t *testing.T) {
	ctx := context.Background()
	ref := newTestEmbedded(t, nil)
	res, err := ref.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Samples[0]
	// old logprobs such that r = exp(π − π_old) = 0.9 for every token.
	old := make([]float64, len(s.Logprobs))
	for k, lp := range s.Logprobs {
		old[k] = lp - math.Log(0.9)
	}
	if len(old) == 0 || slices.Max(old) > 0 {
		t.Fatalf("the sample does not allow r = 0.9 (logprobs %v)", s.Logprobs)
	}
	samples, _ := json.Marshal([]trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: old, Advantage: -1}})
	step := func(loss string) (int, map[string]any, []float64) {
		e := newTestEmbedded(t, nil)
		status, out := post(t, trainer.NewHandler(e, ""), "/v1/grpo_step", `{"step_id": "s", "samples": `+string(samples)+`, "loss": `+loss+`}`)
		return status, out, e.Weights()
	}
	spelled := `{"type": "grpo", "clip_low": 0.2, "clip_high": 0.2, "kl_coef": 0, "kl_estimator": "k3", "clip_ratio_c": 0,
		"mu": 1, "max_grad_norm": 0, "learning_rate": 0.1, "weight_decay": 0, "max_length": 0, "temperature": 1}`
	wantStatus, want, wantW := step(spelled)
	if wantStatus != http.StatusOK || want["clip_frac_low"] != 0.0 {
		t.Fatalf("spelled-out defaults: %d %v", wantStatus, want)
	}
	for _, loss := range []string{
		`{"learning_rate": 0.1}`,
		`{"learning_rate": 0.1, "type": null, "clip_low": null, "clip_high": null, "mu": null, "temperature": null, "kl_estimator": null}`,
	} {
		status, got, w := step(loss)
		if status != http.StatusOK || !reflect.DeepEqual(got, want) || !slices.Equal(w, wantW) {
			t.Errorf("loss %s: %d %v, weights %v; want %v, %v", loss, status, got, w, want, wantW)
		}
	}
	status, zero, zeroW := step(`{"learning_rate": 0.1, "clip_low": 0}`)
	fresh := newTestEmbedded(t, nil).Weights()
	if status != http.StatusOK || zero["clip_frac_low"] != 1.0 || !slices.Equal(zeroW, fresh) || slices.Equal(wantW, fresh) {
		t.Errorf("clip_low 0: %d %v, weights %v (fresh %v, after the default's step %v): want every token clipped, so no gradient",
			status, zero, zeroW, fresh, wantW)
	}
	for field, loss := range map[string]string{
		"clip_low":      `{"learning_rate": 0.1, "clip_low": 1}`,
		"mu":            `{"learning_rate": 0.1, "mu": 0}`,
		"temperature":   `{"learning_rate": 0.1, "temperature": 0}`,
		"learning_rate": `{}`,
	} {
		status, out, _ := step(loss)
		if code, msg := errorOf(t, out); status != http.StatusBadRequest || code != trainer.CodeInvalidArgument || !strings.HasPrefix(msg, "loss."+field+": ") {
			t.Errorf("loss %s: %d %s %q, want 400 invalid_argument naming loss.%s", loss, status, code, msg, field)
		}
	}
}
