package embedding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// LSA puts texts that share no word but co-occurring words close: in this
// corpus "automobile" and "car" always appear together, so a memory about a
// car is similar to a query about an automobile, which hashing (lexical)
// cannot see.
func TestLSAFindsCooccurringWords(t *testing.T) {
	var docs []string
	for i := range 20 {
		docs = append(docs,
			fmt.Sprintf("the car and automobile engine repair shop %d", i),
			fmt.Sprintf("automobile car tyres and engine oil %d", i),
			fmt.Sprintf("wine grapes vineyard harvest cellar %d", i),
			fmt.Sprintf("red wine and vineyard tours %d", i))
	}
	e, err := FitLSA(t.Context(), docs, LSAConfig{Dim: 4, MinDF: 2}, LSAMeta{KBFingerprint: "kb"})
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := e.Embed(t.Context(), []string{"automobile", "car", "vineyard", "zzz unknown"})
	if c := Cosine(vs[0], vs[1]); c < 0.9 {
		t.Errorf("cos(automobile, car) = %.3f, want ≥ 0.9", c)
	}
	if c := Cosine(vs[0], vs[2]); c > 0.3 {
		t.Errorf("cos(automobile, vineyard) = %.3f, want ≤ 0.3", c)
	}
	if Cosine(vs[3], vs[3]) != 0 {
		t.Error("a text without known terms must be the zero vector")
	}
	h, _ := NewHash(1024)
	hv, _ := h.Embed(t.Context(), []string{"automobile", "car"})
	if c := Cosine(hv[0], hv[1]); c > 0.2 {
		t.Errorf("hashing cos(automobile, car) = %.3f: the premise fails", c)
	}
	// deterministic: a second fit is the same model
	e2, _ := FitLSA(t.Context(), docs, LSAConfig{Dim: 4, MinDF: 2}, LSAMeta{KBFingerprint: "kb"})
	if e2.Name() != e.Name() {
		t.Errorf("refit: %s, first %s", e2.Name(), e.Name())
	}
	// persisted, loaded back identical; refused when stale or corrupt
	dir := t.TempDir()
	if err := SaveLSA(t.Context(), dir, e); err != nil {
		t.Fatal(err)
	}
	back, err := LoadLSA(t.Context(), dir, LSAMeta{KBFingerprint: "kb"}, LSAConfig{Dim: 4, MinDF: 2})
	if err != nil || back.Name() != e.Name() {
		t.Fatalf("load: %v (%v)", err, back)
	}
	bv, _ := back.Embed(t.Context(), []string{"automobile"})
	if !slices.Equal(bv[0], vs[0]) {
		t.Error("loaded model embeds differently")
	}
	if _, err := LoadLSA(t.Context(), dir, LSAMeta{KBFingerprint: "other"}, LSAConfig{Dim: 4, MinDF: 2}); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Errorf("other KB: %v", err)
	}
	if _, err := LoadLSA(t.Context(), dir, LSAMeta{KBFingerprint: "kb"}, LSAConfig{Dim: 8, MinDF: 2}); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Errorf("other dimension: %v", err)
	}
	if _, err := LoadLSA(t.Context(), t.TempDir(), LSAMeta{}, LSAConfig{Dim: 4, MinDF: 2}); err == nil || !strings.Contains(err.Error(), "himes index build") {
		t.Errorf("missing model: %v", err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, LSAFile))
	raw[len(raw)-3] ^= 0xff
	_ = os.WriteFile(filepath.Join(dir, LSAFile), raw, 0o644)
	if _, err := LoadLSA(t.Context(), dir, LSAMeta{KBFingerprint: "kb"}, LSAConfig{Dim: 4, MinDF: 2}); err == nil {
		t.Error("corrupt model accepted")
	}
}

func TestLSAIOStopsOnACancelledContext(t *testing.T) {
	docs := []string{"garage door opener", "door repair guide", "garage repair", "opener remote battery"}
	e, err := FitLSA(t.Context(), docs, LSAConfig{Dim: 2, MinDF: 1}, LSAMeta{KBFingerprint: "kb"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := SaveLSA(t.Context(), dir, e); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := LoadLSA(ctx, dir, LSAMeta{KBFingerprint: "kb"}, LSAConfig{Dim: 2, MinDF: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("load: %v, want context.Canceled", err)
	}
	if err := SaveLSA(ctx, t.TempDir(), e); !errors.Is(err, context.Canceled) {
		t.Errorf("save: %v, want context.Canceled", err)
	}
	if _, err := FitLSA(ctx, docs, LSAConfig{Dim: 2, MinDF: 1}, LSAMeta{}); !errors.Is(err, context.Canceled) {
		t.Errorf("fit: %v, want context.Canceled", err)
	}
}
