package trainer

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestOpen(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Embedded.CheckpointDir = t.TempDir()
	p, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.(*Embedded); !ok {
		t.Fatalf("endpoint embedded opened a %T", p)
	}

	srv := httptest.NewServer(NewHandler(p, "sesame"))
	defer srv.Close()
	t.Setenv("HIMES_TEST_TRAINER_TOKEN", "sesame")
	cfg.Endpoint, cfg.Token, cfg.Retries = srv.URL+"/", "$HIMES_TEST_TRAINER_TOKEN", 0
	c, err := Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cl, ok := c.(*Client); !ok || cl.URL() != srv.URL {
		t.Fatalf("opened %T %v", c, c)
	}
	cfg.Token = "wrong"
	if _, err := Open(ctx, cfg, nil); ErrorCode(err) != CodeUnauthorized {
		t.Errorf("wrong token: %v", err)
	}
	cfg.Token = "$HIMES_TEST_TRAINER_TOKEN_UNSET"
	if _, err := Open(ctx, cfg, nil); err == nil || !strings.Contains(err.Error(), "HIMES_TEST_TRAINER_TOKEN_UNSET is not set") {
		t.Errorf("unset token variable: %v", err)
	}
}

// TestConcurrentSameStepID sends one grpo_step from several goroutines at
// once: it is applied exactly once and every caller gets its result.
func TestConcurrentSameStepID(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	res, _ := e.Sample(ctx, SampleRequest{Prompts: []Prompt{bronze()}, Temperature: 1, Seed: 3})
	s := res.Samples[0]
	req := GRPORequest{StepID: "same", Samples: []GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: 1}},
		Loss: LossConfig{Type: LossGRPO, LearningRate: 0.1}}
	const n = 8
	var wg sync.WaitGroup
	out := make([]GRPOResponse, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Interleave reads with the updates.
			if _, err := e.Sample(ctx, SampleRequest{Prompts: []Prompt{coffee()}, N: 2, Temperature: 1}); err != nil {
				errs[i] = err
				return
			}
			out[i], errs[i] = e.GRPOStep(ctx, req)
		}()
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !out[i].Replayed {
			applied++
		}
		if out[i].PolicyVersion != 1 {
			t.Errorf("caller %d saw version %d", i, out[i].PolicyVersion)
		}
	}
	if applied != 1 || e.st.version != 1 {
		t.Errorf("applied %d times, version %d", applied, e.st.version)
	}
}
