package retrieval

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
)

// SmallFloat values computed by hand from SmallFloat.java: lengths below
// 40 are exact, 40–47 keep 4 significant bits (step 2), 100 decodes as 96.
func TestSmallFloatLengthNorms(t *testing.T) {
	if numFreeValues != 24 {
		t.Fatalf("NUM_FREE_VALUES = %d, want 255 − longToInt4(MaxInt32) = 255 − 231 = 24", numFreeValues)
	}
	for _, c := range []struct {
		in   int
		b    uint8
		back int
	}{{0, 0, 0}, {1, 1, 1}, {23, 23, 23}, {24, 24, 24}, {31, 31, 31}, {39, 39, 39}, {40, 40, 40}, {41, 40, 40},
		{42, 41, 42}, {100, 57, 96}, {math.MaxInt32, 255, 24 + 15<<27}} {
		if b := intToByte4(c.in); b != c.b {
			t.Errorf("intToByte4(%d) = %d, want %d", c.in, b, c.b)
		}
		if back := byte4ToInt(c.b); back != c.back {
			t.Errorf("byte4ToInt(%d) = %d, want %d", c.b, back, c.back)
		}
	}
	for b := 1; b < 256; b++ { // decoding is strictly increasing
		if byte4ToInt(uint8(b)) <= byte4ToInt(uint8(b-1)) {
			t.Fatalf("byte4ToInt not increasing at %d", b)
		}
	}
}

// One document, one query term: the score is the formula evaluated by hand
// in float32 (N = 2, df = 1, |d| = 3, avgdl = (3+1)/2 = 2).
func TestLuceneScoreByHand(t *testing.T) {
	ix, err := BuildIndex([]string{"a", "b"}, []string{"x y x", "z"}, BM25Params{K1: 0.9, B: 0.4, Scoring: ScoringLucene})
	if err != nil {
		t.Fatal(err)
	}
	idf := float32(math.Log(1 + (2-1+0.5)/(1+0.5))) // ln 2
	k1, b := float32(0.9), float32(0.4)
	norm := float32(1) / (k1 * ((1 - b) + b*3/2))
	want := idf - idf/(1+2*norm)
	hits := ix.Search([]string{"x"}, 10)
	if len(hits) != 1 || hits[0].Doc != 0 || float32(hits[0].Score) != want {
		t.Fatalf("hits %v, want doc 0 with %v", hits, want)
	}
	if got := ix.IDF("x"); float32(got) != idf {
		t.Fatalf("IDF %v, want %v", got, idf)
	}
}

// What distinguishes Lucene's scoring from the exact one: lengths in the
// same one-byte bucket score alike, a repeated query token counts (a boost
// of 2 doubles the score exactly), and ties go to the smaller id.
func TestLuceneScoringInvariants(t *testing.T) {
	words := func(n int, w string) string { return strings.TrimSpace(strings.Repeat(w+" ", n)) }
	ids := []string{"a", "b", "c", "d", "e"}
	texts := []string{
		"x " + words(99, "f"), // 100 tokens → bucket 96
		"x " + words(96, "g"), // 97 → 96
		"y q",
		"y q",
		words(20, "h"),
	}
	for _, scoring := range []string{ScoringExact, ScoringLucene} {
		ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4, Scoring: scoring})
		if err != nil {
			t.Fatal(err)
		}
		x := ix.Search([]string{"x"}, 10)
		y := ix.Search([]string{"y"}, 10)
		yy := ix.Search([]string{"y", "y"}, 10)
		if scoring == ScoringLucene {
			if x[0].Score != x[1].Score || x[0].Doc != 0 {
				t.Errorf("lucene: lengths 100 and 97 share a norm byte: want equal scores, a first; got %v", x)
			}
			if y[0].Doc != 2 || y[1].Doc != 3 {
				t.Errorf("lucene: tie must go to the smaller id (c), got %v", y)
			}
			if yy[0].Score != 2*y[0].Score {
				t.Errorf("lucene: query y y = %v, want twice y = %v", yy[0].Score, 2*y[0].Score)
			}
		} else {
			if !(x[0].Score > x[1].Score) || x[0].Doc != 1 {
				t.Errorf("exact: the shorter document must score higher, got %v", x)
			}
			if y[0].Doc != 3 {
				t.Errorf("exact: tie goes to the larger document number (d), got %v", y)
			}
			if yy[0].Score != y[0].Score {
				t.Errorf("exact: a repeated token counts once: %v vs %v", yy, y)
			}
		}
	}
	if _, err := BuildIndex([]string{"a"}, []string{"x"}, BM25Params{K1: 0.9, B: 0.4, Scoring: "lucene8"}); err == nil {
		t.Fatal("unknown scoring accepted")
	}
}

// A persisted index records its scoring and analyzer: opening it with
// another one in the config is refused with the cause; an index written
// before scoring was recorded counts as exact.
func TestIndexScoringFingerprint(t *testing.T) {
	dir := t.TempDir()
	kb := writeFile(t, "kb.jsonl", `{"id":"p1","title":"","text":"red apples and green pears"}`+"\n"+`{"id":"p2","title":"","text":"the cats sleep"}`+"\n")
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Scoring, cfg.Analyzer = ScoringLucene, analysis.LuceneEnglish
	idx := filepath.Join(dir, "idx")
	meta, err := BuildIndexDir(ctx, cfg, kb, idx)
	if err != nil {
		t.Fatal(err)
	}
	lucene, _ := analysis.New(analysis.LuceneEnglish)
	if meta.Params.Scoring != ScoringLucene || meta.Analyzer != lucene.ID() {
		t.Fatalf("meta %+v", meta)
	}
	cfg.Index = idx
	p, err := Open(ctx, cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	if p.Index().luc == nil || !p.Index().Analyzer().IsLucene() {
		t.Fatal("loaded index lost its scoring or analyzer")
	}
	hits, err := p.Search(ctx, "apple", 5)
	if err != nil || len(hits) != 1 || hits[0].PassageID != "p1" {
		t.Fatalf("search %v %v", hits, err)
	}
	other := cfg
	other.Scoring = ScoringExact
	if _, err := Open(ctx, other, kb); err == nil || !strings.Contains(err.Error(), "scoring") {
		t.Fatalf("exact config on a lucene index: %v", err)
	}
	other = cfg
	other.Analyzer = analysis.Plain
	if _, err := Open(ctx, other, kb); err == nil || !strings.Contains(err.Error(), "analyzer") {
		t.Fatalf("plain config on a lucene-english index: %v", err)
	}
	if normScoring("") != ScoringExact {
		t.Fatal("an index without a recorded scoring must count as exact")
	}
	bad := DefaultConfig()
	bad.Scoring = "float32"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "scoring") {
		t.Fatalf("validate: %v", err)
	}
}
