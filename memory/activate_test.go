package memory

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/embedding"
)

// syntheticStore is n memories of one user with random embeddings from the
// embedder's space and labels drawn from the taxonomy (so nothing needs
// classifying). dup makes every third memory a copy of the previous
// embedding, and times repeat, so scores and times tie.
func syntheticStore(t testing.TB, cfg Config, dim, n int, dup bool, labels []Label) (*Store, embedding.Embedder) {
	t.Helper()
	ctx := context.Background()
	emb, err := embedding.NewHash(dim)
	if err != nil {
		t.Fatal(err)
	}
	tax, err := DefaultTaxonomy()
	if err != nil {
		t.Fatal(err)
	}
	if labels == nil {
		labels = tax.Labels()
	}
	cls, err := NewEmbeddingClassifier(ctx, tax, emb)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	entries := make([]Entry, n)
	for i := range entries {
		l := labels[rng.IntN(len(labels))]
		v := randVec(rng, dim)
		if dup && i%3 == 2 {
			v = entries[i-1].Embedding
		}
		entries[i] = Entry{User: "u", ID: fmt.Sprintf("m%07d", i), Text: fmt.Sprintf("memory %d", i),
			Time: t0.Add(time.Duration(i/4) * time.Hour), Seq: int64(i % 7), Topic: l.Topic, Subtopic: l.Subtopic,
			Entities: []string{}, Embedding: v}
		if dup && i%3 == 2 { // a twin of the previous memory but for its id and text
			p := entries[i-1]
			entries[i].Time, entries[i].Seq, entries[i].Topic, entries[i].Subtopic = p.Time, p.Seq, p.Topic, p.Subtopic
		}
	}
	m, err := NewStore(ctx, cfg, emb, tax, cls, entries)
	if err != nil {
		t.Fatal(err)
	}
	return m, emb
}

// referenceActivate is activation as first written: collect the whole pool,
// score it with embedding.Cosine and Score, sort it, keep the top n.
func referenceActivate(m *Store, query string, qvec []float32, seq int64, l Label) []string {
	sig := m.cfg.Signals
	var pool []int
	take := func(lb Label) {
		for _, i := range m.parts["u"][lb] {
			e := m.entries[i]
			if seq > 0 && e.Seq >= seq {
				continue
			}
			if !strings.EqualFold(strings.Join(strings.Fields(e.Text), " "), strings.Join(strings.Fields(query), " ")) {
				pool = append(pool, i)
			}
		}
	}
	take(l)
	for _, nb := range m.neighbours[l] {
		if len(pool) >= max(m.cfg.MinPartition, 1) {
			break
		}
		take(nb)
	}
	type cand struct {
		i     int
		score float64
	}
	var cs []cand
	for _, i := range pool {
		cs = append(cs, cand{i, Score(sig, m.cfg.RecencyHalfLife, embedding.Cosine(qvec, m.entries[i].Embedding), l, seq, map[string]bool{}, m.entries[i])})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.score != b.score {
			if a.score > b.score {
				return -1
			}
			return 1
		}
		ea, eb := m.entries[a.i], m.entries[b.i]
		if ea.Seq != eb.Seq {
			if ea.Seq > eb.Seq {
				return -1
			}
			return 1
		}
		if c := eb.Time.Compare(ea.Time); c != 0 {
			return c
		}
		return strings.Compare(ea.ID, eb.ID)
	})
	var ids []string
	for _, c := range cs[:min(len(cs), m.cfg.TopN)] {
		ids = append(ids, m.entries[c.i].ID)
	}
	return ids
}

// Keeping the best few while scanning must select exactly what sorting the
// whole pool selected, ties (equal embeddings, equal times) included, with
// and without extra signals and with widening to neighbouring partitions.
func TestActivateTopNEqualsFullSort(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		sig  Signals
		minP int
		seq  int64
	}{
		{"semantic", Signals{Semantic: 1}, 5, 0},
		{"signals", Signals{Semantic: 1, Topic: 0.3, Recency: 0.2}, 5, 4},
		{"widen", Signals{Semantic: 1}, 200, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.TopN, cfg.MinPartition, cfg.Signals = 6, tc.minP, tc.sig
			m, _ := syntheticStore(t, cfg, 16, 600, true, nil)
			rng := rand.New(rand.NewPCG(1, 2))
			for k := range 30 {
				query := fmt.Sprintf("query %d", k)
				qvec := randVec(rng, 16)
				if k%5 == 0 {
					query, qvec = m.entries[k].Text, m.entries[k].Embedding // a memory equal to the query is skipped
				}
				labels, err := m.cls.Classify(ctx, []string{query}, [][]float32{qvec})
				if err != nil {
					t.Fatal(err)
				}
				mems, _, err := m.ActivateAt(ctx, "u", query, qvec, tc.seq)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, mm := range mems {
					got = append(got, mm.ID)
				}
				if want := referenceActivate(m, query, qvec, tc.seq, labels[0]); !slices.Equal(got, want) {
					t.Fatalf("query %d: activated %v, full sort gives %v", k, got, want)
				}
			}
		})
	}
}

// A quantized store scores from the codes: each activated memory's Sim is
// the cosine of the query with its decoded embedding, the vectors handed to
// re-ranking are the decoded ones, and the float32 store is left as it was.
func TestQuantizedStoreActivation(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.TopN = 4
	m, _ := syntheticStore(t, cfg, 24, 300, false, nil)
	before := slices.Clone(m.entries[0].Embedding)
	for _, bits := range QuantBits {
		for _, rot := range []bool{false, true} {
			q, err := NewQuantizer(bits, 24, rot, 3)
			if err != nil {
				t.Fatal(err)
			}
			qm, err := m.Quantized(q)
			if err != nil {
				t.Fatal(err)
			}
			if qm.Quantizer() != q || m.Quantizer() != nil {
				t.Fatal("Quantizer() does not tell the stores apart")
			}
			rng := rand.New(rand.NewPCG(uint64(bits), 5))
			for range 10 {
				qvec := randVec(rng, 24)
				mems, vecs, err := qm.Activate(ctx, "u", "a question", qvec)
				if err != nil {
					t.Fatal(err)
				}
				if len(mems) != 4 {
					t.Fatalf("%s: %d memories activated", q.Name(), len(mems))
				}
				for j, mm := range mems {
					e, _ := m.Lookup("u", mm.ID)
					c, err := q.Encode(e.Embedding)
					if err != nil {
						t.Fatal(err)
					}
					dec := q.Decode(c)
					if !slices.Equal(vecs[j], dec) {
						t.Fatalf("%s: re-rank vector of %s is not its decoded embedding", q.Name(), mm.ID)
					}
					if want := embedding.Cosine(qvec, dec); math.Abs(mm.Sim-want) > 1e-5 {
						t.Fatalf("%s: sim %v, decoded cosine %v", q.Name(), mm.Sim, want)
					}
					if j > 0 && mm.Score > mems[j-1].Score {
						t.Fatalf("%s: activated memories out of order", q.Name())
					}
				}
			}
		}
	}
	if !slices.Equal(m.entries[0].Embedding, before) {
		t.Fatal("quantizing changed the float32 store")
	}
	bad, _ := NewQuantizer(8, 7, false, 1)
	if _, err := m.Quantized(bad); err == nil || !strings.Contains(err.Error(), "dimension") {
		t.Fatalf("quantizer of the wrong dimension: %v", err)
	}
}

// A memory equal to the query up to case (Unicode folding: the Kelvin sign
// folds to k) and spacing is the query itself and is never activated.
func TestActivateSkipsTheQueryUnderFolding(t *testing.T) {
	ctx := context.Background()
	emb, _ := embedding.NewHash(16)
	tax, _ := DefaultTaxonomy()
	cls, err := NewEmbeddingClassifier(ctx, tax, emb)
	if err != nil {
		t.Fatal(err)
	}
	l := tax.Labels()[0]
	v := []float32{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	cfg := DefaultConfig()
	cfg.TopN = 5
	m, err := NewStore(ctx, cfg, emb, tax, cls, []Entry{
		{User: "u", ID: "same", Text: "The \u212Aelvin   SCALE", Topic: l.Topic, Subtopic: l.Subtopic, Embedding: v},
		{User: "u", ID: "other", Text: "The Celsius scale", Topic: l.Topic, Subtopic: l.Subtopic, Embedding: v},
	})
	if err != nil {
		t.Fatal(err)
	}
	mems, _, err := m.Activate(ctx, "u", "the kelvin scale", v)
	if err != nil {
		t.Fatal(err)
	}
	if len(mems) != 1 || mems[0].ID != "other" {
		t.Fatalf("activated %+v, want only the other memory", mems)
	}
	if foldHash("The \u212Aelvin SCALE") != foldHash("the kelvin scale") {
		t.Fatal("strings equal under folding hash differently")
	}
}

// sources facts activates statements only (Seq 0), questions only earlier
// questions (Seq > 0); all, both. Checked over a synthetic store against a
// filter of the full ranking.
func TestActivateSources(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TopN, cfg.MinPartition = 200, 1000 // the whole pool, in score order
	for _, src := range []string{SourcesAll, SourcesFacts, SourcesQuestions} {
		c := cfg
		c.Sources = src
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		m, emb := syntheticStore(t, c, 32, 60, false, nil)
		qv, err := emb.Embed(t.Context(), []string{"which of these do I like"})
		if err != nil {
			t.Fatal(err)
		}
		mems, _, err := m.ActivateAt(t.Context(), "u", "which of these do I like", qv[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		facts, questions := 0, 0
		for _, e := range m.entries {
			if e.Seq == 0 {
				facts++
			} else {
				questions++
			}
		}
		want := map[string]int{SourcesAll: facts + questions, SourcesFacts: facts, SourcesQuestions: questions}[src]
		if len(mems) != want || facts == 0 || questions == 0 {
			t.Fatalf("sources %s: %d activated, want %d (store: %d facts, %d questions)", src, len(mems), want, facts, questions)
		}
		seqOf := map[string]int64{}
		for _, e := range m.entries {
			seqOf[e.ID] = e.Seq
		}
		for _, a := range mems {
			if s := seqOf[a.ID]; (src == SourcesFacts && s != 0) || (src == SourcesQuestions && s == 0) {
				t.Errorf("sources %s activated %s (seq %d)", src, a.ID, s)
			}
		}
	}
	bad := cfg
	bad.Sources = "answers"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "sources") {
		t.Errorf("sources answers: %v, want an error naming the field", err)
	}
}
