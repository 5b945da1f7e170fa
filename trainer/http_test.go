package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func quietClient(url, token string, opts ...ClientOption) *Client {
	opts = append([]ClientOption{WithBackoff(time.Millisecond, 5*time.Millisecond), WithLogger(discardLogger())}, opts...)
	return NewClient(url, token, opts...)
}

func TestCheckPassesInProcessAndOverHTTP(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	var out bytes.Buffer
	ok, err := Check(ctx, e, &out)
	if err != nil || !ok {
		t.Fatalf("in-process check failed (%v):\n%s", err, out.String())
	}

	e2 := newTestEmbedded(t, nil)
	srv := httptest.NewServer(NewHandler(e2, "sesame"))
	defer srv.Close()
	out.Reset()
	ok, err = Check(ctx, quietClient(srv.URL, "sesame"), &out)
	if err != nil || !ok {
		t.Fatalf("HTTP check failed (%v):\n%s", err, out.String())
	}
	for _, prop := range []string{"info", "sample_shape", "sample_deterministic", "grpo_positive_raises_logprob",
		"grpo_negative_lowers_logprob", "sft_lowers_loss", "step_id_replay", "save_load_restores", "checkpoints_list", "delete",
		"version_precondition", "checkpoint_run_id", "limits"} {
		if !strings.Contains(out.String(), "PASS  "+prop+":") {
			t.Errorf("no PASS line for %s:\n%s", prop, out.String())
		}
	}
	// The check leaves the policy as it found it.
	if e2.Weights()[featBias] != 0 || e2.st.version != 0 {
		t.Errorf("check left the policy at version %d, weights %v", e2.st.version, e2.Weights())
	}
}

// brokenPolicy wraps the embedded policy and breaks one property: grpo_step
// applies nothing while claiming success.
type brokenPolicy struct{ *Embedded }

func (b brokenPolicy) GRPOStep(ctx context.Context, req GRPORequest) (GRPOResponse, error) {
	return GRPOResponse{PolicyVersion: b.st.version + 1}, nil
}

func TestCheckDetectsBrokenEndpoint(t *testing.T) {
	var out bytes.Buffer
	ok, err := Check(context.Background(), brokenPolicy{newTestEmbedded(t, nil)}, &out)
	if err != nil || ok {
		t.Fatalf("check passed a policy whose grpo_step does nothing (%v):\n%s", err, out.String())
	}
	for _, prop := range []string{"grpo_positive_raises_logprob", "grpo_negative_lowers_logprob", "step_id_replay"} {
		if !strings.Contains(out.String(), "FAIL  "+prop+":") {
			t.Errorf("no FAIL line for %s:\n%s", prop, out.String())
		}
	}
	if !strings.Contains(out.String(), "PASS  sft_lowers_loss:") {
		t.Errorf("sft should still pass:\n%s", out.String())
	}
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
	h := NewHandler(e, "")
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
	res, _ := e.Sample(ctx, SampleRequest{Prompts: []Prompt{bronze()}, Temperature: 1, Seed: 4})
	s := res.Samples[0]
	req := GRPORequest{StepID: "dropped-1", Samples: []GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: 1}},
		Loss: LossConfig{Type: LossGRPO, LearningRate: 0.1}}
	want, err := twin.GRPOStep(ctx, req)
	if err != nil {
		t.Fatal(err)
	}

	c := quietClient("http://"+proxy.ln.Addr().String(), "", WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
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
	if got != want || !reflect.DeepEqual(e.Weights(), twin.Weights()) {
		t.Errorf("the update was not applied exactly once: %+v vs %+v", got, want)
	}

	// The same with an auto-generated step_id: the client reuses it on retry.
	req.StepID = ""
	proxy.conns.Store(0)
	c2 := quietClient("http://"+proxy.ln.Addr().String(), "", WithHTTPClient(&http.Client{Transport: &http.Transport{}}))
	got, err = c2.GRPOStep(ctx, req)
	if err != nil || !got.Replayed || got.PolicyVersion != 2 {
		t.Errorf("auto step_id: %+v %v, want replayed at version 2", got, err)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(NewHandler(e, "sesame"))
	defer srv.Close()

	c := quietClient(srv.URL, "sesame")
	_, err := c.GRPOStep(ctx, GRPORequest{StepID: "x", Samples: []GRPOSample{{Prompt: bronze()}}, Loss: LossConfig{Type: "x", LearningRate: 1}})
	if want := "trainer at " + srv.URL + " refused grpo_step: unknown loss type 'x'"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want prefix %q", err, want)
	}
	if ErrorCode(err) != CodeUnknownLossType {
		t.Errorf("code %q", ErrorCode(err))
	}
	_, err = quietClient(srv.URL, "wrong").Info(ctx)
	if ErrorCode(err) != CodeUnauthorized {
		t.Errorf("wrong token: %v", err)
	}
	_, err = c.Load(ctx, LoadRequest{Name: "missing"})
	if ErrorCode(err) != CodeNotFound {
		t.Errorf("missing checkpoint: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil || !info.Capabilities.Auth || info.TokenKind != "decisions" {
		t.Errorf("info: %+v %v", info, err)
	}

	for _, tc := range []struct{ method, path, body, code string }{
		{"GET", "/v1/grpo_step", "", CodeInvalidArgument},
		{"POST", "/v1/nope", "{}", CodeNotFound},
		{"POST", "/v1/sample", "{not json", CodeInvalidArgument},
		{"POST", "/v1/sft_step", `{"step_id":"a","examples":[]}`, CodeInvalidArgument},
	} {
		r, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		r.Header.Set("Authorization", "Bearer sesame")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		var env struct{ Error Error }
		_ = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if env.Error.Code != tc.code || resp.StatusCode/100 != 4 {
			t.Errorf("%s %s: status %d code %q, want 4xx %q", tc.method, tc.path, resp.StatusCode, env.Error.Code, tc.code)
		}
	}
}

func TestClientRetriesOnlyRetryable(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/info" && n <= 2:
			writeError(w, newErr(CodeUnavailable, "warming up"))
		case r.URL.Path == "/v1/info":
			reply(w, Info{ProtocolVersion: 1}, nil)
		default:
			writeError(w, newErr(CodeOOM, "out of memory"))
		}
	}))
	defer srv.Close()
	c := quietClient(srv.URL, "")
	if info, err := c.Info(context.Background()); err != nil || info.ProtocolVersion != 1 || calls.Load() != 3 {
		t.Errorf("info after two unavailable answers: %v after %d calls", err, calls.Load())
	}
	calls.Store(0)
	if _, err := c.Sample(context.Background(), SampleRequest{}); ErrorCode(err) != CodeOOM || calls.Load() != 1 {
		t.Errorf("oom: %v after %d calls, want one call", err, calls.Load())
	}
	// Connection refused: retried, then reported with the endpoint named.
	srv.Close()
	c = quietClient(srv.URL, "", WithRetries(2))
	if _, err := c.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "trainer at "+srv.URL) {
		t.Errorf("closed server: %v", err)
	}
}

func TestClientNonProtocolErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "upstream connect error", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := quietClient(srv.URL, "", WithRetries(2)).Info(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 502: upstream connect error") || calls.Load() != 3 {
		t.Errorf("502 without a protocol body: %v after %d calls, want 3 calls", err, calls.Load())
	}
}

// badSampler breaks sample_shape: positive logprobs.
type badSampler struct{ *Embedded }

func (b badSampler) Sample(ctx context.Context, req SampleRequest) (SampleResponse, error) {
	r, err := b.Embedded.Sample(ctx, req)
	for i := range r.Samples {
		for t := range r.Samples[i].Logprobs {
			r.Samples[i].Logprobs[t] = 0.5
		}
	}
	return r, err
}

// forgetfulLoader breaks save_load_restores: load reports success but
// restores nothing.
type forgetfulLoader struct{ *Embedded }

func (f forgetfulLoader) Load(ctx context.Context, req LoadRequest) (LoadResponse, error) {
	return LoadResponse{Name: req.Name, PolicyVersion: f.st.version}, nil
}

func TestCheckDetectsOtherViolations(t *testing.T) {
	var out bytes.Buffer
	ok, _ := Check(context.Background(), badSampler{newTestEmbedded(t, nil)}, &out)
	if ok || !strings.Contains(out.String(), "FAIL  sample_shape: samples[0].logprobs[0] = 0.5, want ≤ 0") {
		t.Errorf("positive logprobs passed:\n%s", out.String())
	}
	out.Reset()
	ok, _ = Check(context.Background(), forgetfulLoader{newTestEmbedded(t, nil)}, &out)
	if ok || !strings.Contains(out.String(), "FAIL  save_load_restores:") {
		t.Errorf("a no-op load passed:\n%s", out.String())
	}
}

// TestClientRefusesUnadvertisedLossOptions: an endpoint that predates
// clip_ratio_c and kl_estimator would ignore them and train another loss;
// the client asks info first and refuses, and passes them to one that
// advertises them (the embedded policy over HTTP).
func TestClientRefusesUnadvertisedLossOptions(t *testing.T) {
	ctx := context.Background()
	var steps int
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/info" {
			fmt.Fprint(w, `{"protocol_version": 1, "implementation": "old", "loss_types": ["grpo"], "policy_version": 0}`)
			return
		}
		steps++
		fmt.Fprint(w, `{"loss": 0, "policy_version": 1}`)
	}))
	defer old.Close()
	c := quietClient(old.URL, "")
	for _, lc := range []LossConfig{
		{Type: LossGRPO, LearningRate: 1, ClipRatioC: 3},
		{Type: LossGRPO, LearningRate: 1, KLEstimator: KLLowVar},
	} {
		_, err := c.GRPOStep(ctx, GRPORequest{Loss: lc})
		if err == nil || !strings.Contains(err.Error(), "does not advertise") && !strings.Contains(err.Error(), "offers only [k3]") {
			t.Errorf("%+v: got %v, want a refusal", lc, err)
		}
	}
	if _, err := c.GRPOStep(ctx, GRPORequest{Loss: LossConfig{Type: LossGRPO, LearningRate: 1, KLEstimator: KLK3}}); err != nil || steps != 1 {
		t.Errorf("plain k3 step: %v (%d steps reached the server, want 1)", err, steps)
	}

	e := newTestEmbedded(t, nil)
	srv := httptest.NewServer(NewHandler(e, ""))
	defer srv.Close()
	ce := quietClient(srv.URL, "")
	samp, err := ce.Sample(ctx, SampleRequest{Prompts: []Prompt{bronze()}, N: 2, Temperature: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var gs []GRPOSample
	for i, s := range samp.Samples {
		gs = append(gs, GRPOSample{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(2*i - 1)})
	}
	if _, err := ce.GRPOStep(ctx, GRPORequest{Samples: gs, Loss: LossConfig{Type: LossGRPO, LearningRate: 0.1, ClipRatioC: 3,
		KLEstimator: KLLowVar, KLCoef: 0.1}}); err != nil {
		t.Fatalf("embedded policy over HTTP refused dual clip / low_var_kl: %v", err)
	}
}
