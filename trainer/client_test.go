package trainer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func quietClient(url, token string, opts ...ClientOption) *Client {
	opts = append([]ClientOption{WithBackoff(time.Millisecond, 5*time.Millisecond), WithLogger(discardLogger())}, opts...)
	return NewClient(url, token, opts...)
}

// TestDial opens a client of an endpoint URL with a token from the
// environment: the info call authenticates, a wrong token and an unset
// variable are errors naming the cause, "embedded" is not a URL to dial.
func TestDial(t *testing.T) {
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer sesame" {
			writeError(w, NewError(CodeUnauthorized, "missing or wrong bearer token"))
			return
		}
		reply(w, Info{ProtocolVersion: ProtocolVersion}, nil)
	}))
	defer srv.Close()
	t.Setenv("HIMES_TEST_TRAINER_TOKEN", "sesame")
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Token, cfg.Retries = srv.URL+"/", "$HIMES_TEST_TRAINER_TOKEN", 0
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.URL() != srv.URL {
		t.Errorf("dialled %s, want %s", c.URL(), srv.URL)
	}
	cfg.Token = "wrong"
	if _, err := Dial(ctx, cfg); ErrorCode(err) != CodeUnauthorized {
		t.Errorf("wrong token: %v", err)
	}
	cfg.Token = "$HIMES_TEST_TRAINER_TOKEN_UNSET"
	if _, err := Dial(ctx, cfg); err == nil || !strings.Contains(err.Error(), "HIMES_TEST_TRAINER_TOKEN_UNSET is not set") {
		t.Errorf("unset token variable: %v", err)
	}
	if _, err := Dial(ctx, DefaultConfig()); err == nil {
		t.Error("Dial of endpoint \"embedded\" succeeded")
	}
}

func TestClientRetriesOnlyRetryable(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/info" && n <= 2:
			writeError(w, NewError(CodeUnavailable, "warming up"))
		case r.URL.Path == "/v1/info":
			reply(w, Info{ProtocolVersion: 1}, nil)
		default:
			writeError(w, NewError(CodeOOM, "out of memory"))
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

// TestClientRefusesUnadvertisedLossOptions: an endpoint that predates
// clip_ratio_c and kl_estimator would ignore them and train another loss;
// the client asks info first and refuses (one that advertises them takes
// them: embedded's TestLossOptionsOverHTTP).
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
		{LearningRate: new(1.0), ClipRatioC: new(3.0)},
		{LearningRate: new(1.0), KLEstimator: new(KLLowVar)},
	} {
		_, err := c.GRPOStep(ctx, GRPORequest{Loss: lc})
		if err == nil || !strings.Contains(err.Error(), "does not advertise") && !strings.Contains(err.Error(), "offers only [k3]") {
			t.Errorf("%+v: got %v, want a refusal", lc, err)
		}
	}
	if _, err := c.GRPOStep(ctx, GRPORequest{Loss: LossConfig{Type: new(LossGRPO), LearningRate: new(1.0), KLEstimator: new(KLK3)}}); err != nil || steps != 1 {
		t.Errorf("plain k3 step: %v (%d steps reached the server, want 1)", err, steps)
	}
}

func TestExposedWithoutToken(t *testing.T) {
	for _, tc := range []struct {
		addr, token string
		want        bool
	}{
		{"127.0.0.1:8765", "", false},
		{"[::1]:8765", "", false},
		{"0.0.0.0:8765", "", true},
		{"[::]:8765", "", true},
		{"192.168.1.20:8765", "", true},
		{"0.0.0.0:8765", "sesame", false},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := ExposedWithoutToken(a, tc.token); got != tc.want {
			t.Errorf("%s token %q: exposed %v, want %v", tc.addr, tc.token, got, tc.want)
		}
	}
}
