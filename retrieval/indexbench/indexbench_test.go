package indexbench

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// The phases in this process on a tiny corpus: gen writes the KB, build
// indexes every passage, query answers every query; each prints one JSON
// line of what it measured.
func TestPhasesOnATinyCorpus(t *testing.T) {
	dir := t.TempDir()
	p := Params{Docs: 300, Vocab: 200, Len: 12, S: 1.07, Queries: 20, Seed: 1, Scoring: "exact", Format: "jsonl"}
	got := map[string]Phase{}
	for _, ph := range []string{"gen", "build", "query", "membuild"} {
		var out bytes.Buffer
		if err := RunPhase(t.Context(), &out, ph, dir, p); err != nil {
			t.Fatalf("phase %s: %v", ph, err)
		}
		var r Phase
		if err := json.Unmarshal(lastLine(out.Bytes()), &r); err != nil {
			t.Fatalf("phase %s printed %q: %v", ph, out.String(), err)
		}
		if r.Phase != ph {
			t.Fatalf("phase %s reported itself as %q", ph, r.Phase)
		}
		got[ph] = r
	}
	b, m := got["build"], got["membuild"]
	if b.Postings <= 0 || b.Terms <= 0 || b.IndexBytes <= 0 {
		t.Fatalf("build measured %+v: want postings, terms and an index size", b)
	}
	// The on-disk and the in-memory index hold the same postings and terms.
	if m.Postings != b.Postings || m.Terms != b.Terms {
		t.Fatalf("in-memory index %d postings / %d terms, on-disk %d / %d", m.Postings, m.Terms, b.Postings, b.Terms)
	}
	if q := got["query"]; q.P50us <= 0 || q.P99us < q.P50us {
		t.Fatalf("query latencies p50 %v µs, p99 %v µs", q.P50us, q.P99us)
	}
	if err := RunPhase(t.Context(), &bytes.Buffer{}, "nonsense", dir, p); err == nil {
		t.Fatal("an unknown phase was accepted")
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{"a\nb\n": "b", "only": "only", "x\n\n{}\n\n": "{}", "": ""} {
		if got := string(lastLine([]byte(in))); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// Parameters the generator cannot honour are refused by flag: before, --s 1
// crashed a child on a nil Zipf, --vocab 1 drew query words for ever, and
// --docs 0 failed as "phase build: exit status 1".
func TestParamsValidate(t *testing.T) {
	ok := Params{Docs: 300, Vocab: 200, Len: 12, S: 1.07, Queries: 20}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit func(*Params)
		want string
	}{
		{func(p *Params) { p.Docs = 0 }, "--docs must be ≥ 1"},
		{func(p *Params) { p.Vocab = 39 }, "--vocab must be ≥ 40"},
		{func(p *Params) { p.Len = 0 }, "--len must be ≥ 1"},
		{func(p *Params) { p.S = 1 }, "--s (the Zipf exponent) must be a finite number > 1"},
		{func(p *Params) { p.S = math.Inf(1) }, "--s (the Zipf exponent)"},
		{func(p *Params) { p.Queries = 0 }, "--queries must be ≥ 1"},
		{func(p *Params) { p.Block = -1 }, "--block-docs must be ≥ 0"},
	} {
		p := ok
		c.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", p, err, c.want)
		}
	}
}
