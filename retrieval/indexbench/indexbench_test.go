package indexbench

import (
	"bytes"
	"encoding/json"
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
