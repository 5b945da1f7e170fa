package grpo

import (
	"context"
	"testing"
)

func BenchmarkZZFast(b *testing.B) {
	tr := benchLoop(b, 0, 64, 16, 8, false)
	ctx := context.Background()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		if _, err := tr.Step(ctx, i); err != nil {
			b.Fatal(err)
		}
	}
}
