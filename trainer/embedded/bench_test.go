package embedded

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// benchBatch is 8 prompts × 8 samples, a default GRPO step's batch.
func benchBatch(b *testing.B, e *Policy) []trainer.GRPOSample {
	prompts := []trainer.Prompt{bronze(), coffee(), bronze(), coffee(), bronze(), coffee(), bronze(), coffee()}
	res, err := e.Sample(context.Background(), trainer.SampleRequest{Prompts: prompts, N: 8, Temperature: 1, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	var out []trainer.GRPOSample
	for k, s := range res.Samples {
		out = append(out, trainer.GRPOSample{Prompt: prompts[s.PromptIndex], TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: float64(k%5) - 2})
	}
	return out
}

func BenchmarkEmbeddedSample(b *testing.B) {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = b.TempDir()
	e, _ := New(cfg, nil)
	req := trainer.SampleRequest{Prompts: []trainer.Prompt{bronze(), coffee(), bronze(), coffee(), bronze(), coffee(), bronze(), coffee()}, N: 8, Temperature: 1}
	for i := 0; b.Loop(); i++ {
		req.Seed = int64(i)
		if _, err := e.Sample(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEmbeddedGRPOStep(b *testing.B) {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = b.TempDir()
	e, _ := New(cfg, nil)
	samples := benchBatch(b, e)
	for i := 0; b.Loop(); i++ {
		_, err := e.GRPOStep(context.Background(), trainer.GRPORequest{StepID: fmt.Sprint(i), Samples: samples,
			Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(1e-3), KLCoef: new(0.04), Mu: new(1)}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHTTPGRPOStep is BenchmarkEmbeddedGRPOStep through the client and
// handler on a loopback server: the protocol's overhead per step.
func BenchmarkHTTPGRPOStep(b *testing.B) {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = b.TempDir()
	e, _ := New(cfg, nil)
	samples := benchBatch(b, e)
	srv := httptest.NewServer(trainer.NewHandler(e, ""))
	defer srv.Close()
	c := trainer.NewClient(srv.URL, "")
	for i := 0; b.Loop(); i++ {
		_, err := c.GRPOStep(context.Background(), trainer.GRPORequest{StepID: fmt.Sprint(i), Samples: samples,
			Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(1e-3), KLCoef: new(0.04), Mu: new(1)}})
		if err != nil {
			b.Fatal(err)
		}
	}
}
