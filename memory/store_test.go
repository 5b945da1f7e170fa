package memory

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/embedding"
)

// mapEmbedder returns fixed vectors for known texts and a zero vector otherwise.
type mapEmbedder struct {
	vecs map[string][]float32
	dim  int
}

func (m mapEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if v, ok := m.vecs[t]; ok {
			out[i] = v
		} else {
			out[i] = make([]float32, m.dim)
		}
	}
	return out, nil
}
func (m mapEmbedder) Dim() int     { return m.dim }
func (m mapEmbedder) Name() string { return "map" }

type mapClassifier map[string]Label

func (m mapClassifier) Classify(_ context.Context, texts []string, _ [][]float32) ([]Label, error) {
	out := make([]Label, len(texts))
	for i, t := range texts {
		l, ok := m[t]
		if !ok {
			return nil, fmt.Errorf("unexpected text %q", t)
		}
		out[i] = l
	}
	return out, nil
}

func TestActivatePartitionFallbackAndExclusion(t *testing.T) {
	tax, err := ParseTaxonomy([]byte(`topics:
  - {name: A, description: a, subtopics: [{name: a1, description: x}, {name: a2, description: y}]}
  - {name: B, description: b, subtopics: [{name: b1, description: z}]}
`), "test")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	e := func(user, q, topic, sub string, day int, v ...float32) Entry {
		return Entry{User: user, Text: q, Topic: topic, Subtopic: sub, Time: t0.AddDate(0, 0, day), Embedding: v}
	}
	entries := []Entry{
		e("u", "q1", "A", "a1", 1, 1, 0, 0),
		e("u", "q2", "A", "a1", 2, 0.6, 0.8, 0),
		e("u", "q3", "A", "a2", 3, 0, 1, 0),
		e("u", "q4", "B", "b1", 4, 0, 0, 1),
		e("u", "Same  query", "A", "a1", 5, 1, 0, 0),
		e("v", "v1", "A", "a1", 1, 1, 0, 0),
	}
	emb := mapEmbedder{dim: 3}
	cls := mapClassifier{"same query": {"A", "a1"}}
	activate := func(topN, minPart int) []Activated {
		t.Helper()
		m, err := NewStore(t.Context(), Config{TopN: topN, MinPartition: minPart}, emb, tax, cls, entries)
		if err != nil {
			t.Fatal(err)
		}
		mems, vecs, err := m.Activate(t.Context(), "u", "same query", []float32{1, 0, 0})
		if err != nil {
			t.Fatal(err)
		}
		if len(vecs) != len(mems) {
			t.Fatalf("%d memories, %d vectors", len(mems), len(vecs))
		}
		return mems
	}
	names := func(ms []Activated) string {
		var s []string
		for _, m := range ms {
			s = append(s, fmt.Sprintf("%s:%.1f", m.Text, m.Sim))
		}
		return strings.Join(s, " ")
	}
	// own partition suffices (2 ≥ 2); the identical query is excluded; v's memories never appear
	if got, want := names(activate(2, 2)), "q1:1.0 q2:0.6"; got != want {
		t.Errorf("topN=2 min=2: got %s, want %s", got, want)
	}
	// partition too small (2 < 4): widen to the same topic's a2, then B; ties → more recent first
	if got, want := names(activate(4, 4)), "q1:1.0 q2:0.6 q4:0.0 q3:0.0"; got != want {
		t.Errorf("topN=4 min=4: got %s, want %s", got, want)
	}
	// widening stops as soon as enough: min=3 takes a2 (same topic) but not B
	if got, want := names(activate(4, 3)), "q1:1.0 q2:0.6 q3:0.0"; got != want {
		t.Errorf("topN=4 min=3: got %s, want %s", got, want)
	}
	m, _ := NewStore(t.Context(), Config{TopN: 2}, emb, tax, cls, entries)
	if mems, _, _ := m.Activate(t.Context(), "stranger", "same query", []float32{1, 0, 0}); len(mems) != 0 {
		t.Errorf("unknown user activated %v", mems)
	}
}

func TestEmbeddingClassifierDefaultTaxonomy(t *testing.T) {
	tax, err := DefaultTaxonomy()
	if err != nil {
		t.Fatal(err)
	}
	if len(tax.Topics) != 17 {
		t.Fatalf("%d topics", len(tax.Topics))
	}
	emb, _ := embedding.NewHash(1024)
	cls, err := NewEmbeddingClassifier(t.Context(), tax, emb)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]Label{
		"How do you know when your garage door opener is going bad?": {"home", "repair"},
		"what are the symptoms of diabetes":                          {"health", "conditions"},
		"coffee or tea or beer":                                      {"food", "drinks"},
		"!!! ???":                                                    {"general", "misc"}, // no features at all
	}
	for q, want := range cases {
		v, _ := emb.Embed(t.Context(), []string{q})
		got, err := cls.Classify(t.Context(), []string{q}, v)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != want {
			t.Errorf("%q → %s, want %s", q, got[0], want)
		}
	}
}

func TestMemoryParquetRoundTrip(t *testing.T) {
	emb, _ := embedding.NewHash(64)
	t0 := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
	var entries []Entry
	for i, q := range []string{"garage door opener repair", "diabetes symptoms", "best red wine", "fix a leaking faucet", "how tall is everest"} {
		entries = append(entries, Entry{User: []string{"alice", "bob"}[i%2], Text: q, Time: t0.Add(time.Duration(i) * time.Hour)})
	}
	cfg := DefaultConfig()
	m, err := Build(t.Context(), cfg, emb, entries)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mem.parquet")
	if err := Save(t.Context(), path, m); err != nil {
		t.Fatal(err)
	}
	back, err := Load(t.Context(), path, cfg, emb)
	if err != nil {
		t.Fatal(err)
	}
	if back.Len() != m.Len() {
		t.Fatalf("%d entries back, %d written", back.Len(), m.Len())
	}
	byQuery := map[string]Entry{}
	for _, e := range m.Entries() {
		byQuery[e.Text] = e
	}
	for _, got := range back.Entries() {
		want := byQuery[got.Text]
		if got.User != want.User || !got.Time.Equal(want.Time) || got.Topic != want.Topic || got.Subtopic != want.Subtopic {
			t.Errorf("entry %q: got %+v, want %+v", got.Text, got, want)
		}
		if len(got.Embedding) != 64 {
			t.Fatalf("embedding dim %d", len(got.Embedding))
		}
		for i := range got.Embedding {
			if got.Embedding[i] != want.Embedding[i] {
				t.Fatalf("entry %q: embedding differs at %d", got.Text, i)
			}
		}
	}
	for _, u := range []string{"alice", "bob"} {
		if fmt.Sprint(back.Partitions(u)) != fmt.Sprint(m.Partitions(u)) {
			t.Errorf("user %s partitions %v, want %v", u, back.Partitions(u), m.Partitions(u))
		}
	}
	other, _ := embedding.NewHash(128)
	if _, err := Load(t.Context(), path, cfg, other); err == nil || !strings.Contains(err.Error(), "embedded with") {
		t.Fatalf("other embedder: got %v", err)
	}
}

// A turn sees the questions its user asked before it and the facts (Seq 0),
// never its own or a later question.
func TestActivateAtExcludesOwnAndLaterQuestions(t *testing.T) {
	tax, _ := ParseTaxonomy([]byte("topics:\n  - {name: A, description: a, subtopics: [{name: a1, description: x}]}\n"), "test")
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	entries := []Entry{
		{User: "u", ID: "f", Text: "a fact", Topic: "A", Subtopic: "a1", Embedding: []float32{1, 0}},
		{User: "u", Text: "first", Seq: 1, Topic: "A", Subtopic: "a1", Time: t0, Embedding: []float32{1, 0}},
		{User: "u", Text: "second", Seq: 2, Topic: "A", Subtopic: "a1", Time: t0.Add(time.Hour), Embedding: []float32{1, 0}},
		{User: "u", Text: "third", Seq: 3, Topic: "A", Subtopic: "a1", Time: t0.Add(2 * time.Hour), Embedding: []float32{1, 0}},
	}
	m, err := NewStore(t.Context(), Config{TopN: 5}, mapEmbedder{dim: 2}, tax, mapClassifier{"q": {"A", "a1"}}, entries)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	mems, _, _ := m.ActivateAt(t.Context(), "u", "q", []float32{1, 0}, 2)
	for _, mm := range mems {
		got = append(got, mm.ID+"="+mm.Text)
	}
	// equal similarity: the later question first, the fact (Seq 0) last
	if fmt.Sprint(got) != "[m2=first f=a fact]" {
		t.Fatalf("at the second question: got %v, want [m2=first f=a fact]", got)
	}
	all, _, _ := m.Activate(t.Context(), "u", "q", []float32{1, 0})
	if len(all) != 4 || all[0].Text != "third" || all[2].Text != "first" || all[3].ID != "f" {
		t.Fatalf("no cutoff: got %+v", all)
	}
}
