package embedded

import (
	"context"
	"encoding/json"
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
		Loss: trainer.LossConfig{Type: trainer.LossGRPO, LearningRate: 0.1}}
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
	if got != want || !reflect.DeepEqual(e.Weights(), twin.Weights()) {
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
	_, err := c.GRPOStep(ctx, trainer.GRPORequest{StepID: "x", Samples: []trainer.GRPOSample{{Prompt: bronze()}}, Loss: trainer.LossConfig{Type: "x", LearningRate: 1}})
	if want := "trainer at " + srv.URL + " refused grpo_step: unknown loss type 'x'"; err == nil || !strings.HasPrefix(err.Error(), want) {
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
	if _, err := ce.GRPOStep(ctx, trainer.GRPORequest{Samples: gs, Loss: trainer.LossConfig{Type: trainer.LossGRPO, LearningRate: 0.1, ClipRatioC: 3,
		KLEstimator: trainer.KLLowVar, KLCoef: 0.1}}); err != nil {
		t.Fatalf("embedded policy over HTTP refused dual clip / low_var_kl: %v", err)
	}
}
