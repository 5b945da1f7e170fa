package grpo

import (
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A diverged value in a metrics line stops the write naming its key, and
// leaves the log as it was (no partial line).
func TestMetricsLogNamesNonFiniteKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	m, err := openMetrics(path, 0, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.f.Close()
	good := StepMetrics{Kind: "step", Step: 1, KL: ptr(0.25)}
	if err := m.Write(good); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		line any
		key  string
	}{
		{StepMetrics{Kind: "step", Step: 2, KL: ptr(math.Inf(1))}, "kl is +Inf"},
		{StepMetrics{Kind: "step", Step: 2, Terms: &Terms{RougeLF1: math.NaN()}}, "terms/rougeL_f1 is NaN"},
		{StepMetrics{Kind: "step", Step: 2, LR: math.Inf(-1)}, "lr is -Inf"},
	}
	for _, c := range cases {
		err := m.Write(c.line)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("want an error naming %q, got %v", c.key, err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 || m.lines != 1 {
		t.Errorf("log has %d lines (counted %d), want the one good line", n, m.lines)
	}
	if k, _ := nonFinite(good); k != "" {
		t.Errorf("finite line reported %q", k)
	}
}
