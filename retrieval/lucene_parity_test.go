package retrieval

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// parityRecord is one query of the reference rankings that
// scripts/lucene_ref/lucene_ref.py (an independent Python transcription of
// Lucene's and Anserini's code) wrote for the shared KB: the top 10 passage
// ids with the float32 bits of their scores.
type parityRecord struct {
	QID, Field, Text string
	Hits             [][2]string
}

func readParity(t testing.TB, name string) []parityRecord {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "lucene_parity", name+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []parityRecord
	sc := bufio.NewScanner(gz)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r parityRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sharedIndex indexes the shared KB as the pipeline does (one chunk per
// passage, title + text).
func sharedIndex(t *testing.T, analyzer, scoring string) *Index {
	t.Helper()
	kb, err := corpus.Load(t.Context(), filepath.Join(sharedtest.SharedDir(t), "kb", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	an, err := analysis.New(analyzer)
	if err != nil {
		t.Fatal(err)
	}
	ids, texts := chunkTexts(chunks)
	ix, err := BuildIndexWith(ids, texts, BM25Params{K1: 0.9, B: 0.4, Scoring: scoring}, an)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// agreement compares an index's top 10 with the reference: lists equal in
// order, equal as sets, and (for Lucene scoring) scores equal to the bit.
type agreement struct{ queries, inOrder, asSets, scoresEqual int }

func (a agreement) String() string {
	pct := func(n int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(a.queries)) }
	return fmt.Sprintf("%d queries: %s identical in order, %s as sets, %s with bit-equal scores",
		a.queries, pct(a.inOrder), pct(a.asSets), pct(a.scoresEqual))
}

func compareParity(t *testing.T, ix *Index, refs []parityRecord, verbose bool) agreement {
	var a agreement
	shown := 0
	for _, r := range refs {
		a.queries++
		hits := ix.SearchText(r.Text, 10)
		got := make([]string, len(hits))
		gotBits := make([]string, len(hits))
		for i, h := range hits {
			got[i] = corpus.ChunkPassageID(ix.ID(h.Doc))
			gotBits[i] = fmt.Sprintf("%08x", math.Float32bits(float32(h.Score)))
		}
		want := make([]string, len(r.Hits))
		wantBits := make([]string, len(r.Hits))
		for i, h := range r.Hits {
			want[i], wantBits[i] = h[0], h[1]
		}
		if slices.Equal(got, want) {
			a.inOrder++
		}
		if slices.Equal(got, want) && slices.Equal(gotBits, wantBits) {
			a.scoresEqual++
		} else if verbose && shown < 5 {
			shown++
			t.Logf("%s %s %q:\n  got  %v %v\n  want %v %v", r.QID, r.Field, r.Text, got, gotBits, want, wantBits)
		}
		gs, ws := slices.Clone(got), slices.Clone(want)
		slices.Sort(gs)
		slices.Sort(ws)
		if slices.Equal(gs, ws) {
			a.asSets++
		}
	}
	return a
}

// Lucene scoring with each analyzer reproduces the reference rankings of
// the 825 judged turns' questions and rewrites over the shared KB exactly:
// the same top 10 in the same order, every score the same float32.
func TestLuceneParitySharedKB(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): indexes the shared knowledge base several times")
	}
	for _, tc := range []struct{ analyzer, ref string }{
		{analysis.Plain, "plain"},
		{analysis.LuceneEnglish, "lucene-english"},
	} {
		refs := readParity(t, tc.ref)
		if len(refs) != 2*825 {
			t.Fatalf("%s: %d reference queries, want 1650 (825 turns × question, rewrite)", tc.ref, len(refs))
		}
		lucene := sharedIndex(t, tc.analyzer, ScoringLucene)
		after := compareParity(t, lucene, refs, true)
		t.Logf("analyzer %s, scoring lucene vs the reference: %v", tc.analyzer, after)
		if after.scoresEqual != after.queries {
			t.Errorf("analyzer %s: Lucene scoring differs from the reference transcription on %d of %d queries",
				tc.analyzer, after.queries-after.scoresEqual, after.queries)
		}
		exact := sharedIndex(t, tc.analyzer, ScoringExact)
		t.Logf("analyzer %s, scoring exact vs the reference: %v", tc.analyzer, compareParity(t, exact, refs, false))
		if tc.analyzer == analysis.LuceneEnglish {
			snow := sharedIndex(t, analysis.English, ScoringExact)
			t.Logf("analyzer english (Snowball), scoring exact vs the lucene-english reference: %v", compareParity(t, snow, refs, false))
		}
		// the three search strategies agree under Lucene scoring
		for _, r := range refs[:200] {
			toks := lucene.Analyzer().Tokenize(r.Text)
			dense, daat, ex := lucene.searchLucene(toks, 10, true), lucene.searchLucene(toks, 10, false), lucene.SearchExhaustive(toks, 10)
			if !slices.Equal(dense, daat) || !slices.Equal(dense, ex) {
				t.Fatalf("%s %q: dense %v, document at a time %v, exhaustive %v", tc.analyzer, r.Text, dense, daat, ex)
			}
		}
	}
}
