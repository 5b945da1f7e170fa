package retrieval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MemoryEntry is one historical query of a user, with its ATM label and
// embedding. Topic/Subtopic and Embedding may be left empty when building:
// BuildMemory fills them.
type MemoryEntry struct {
	User      string
	Query     string
	Time      time.Time
	Topic     string
	Subtopic  string
	Embedding []float32
}

// MemoryStore is HiMeS long-term memory: every user's historical queries,
// partitioned by (topic, subtopic). It is immutable after building and safe
// for concurrent use.
type MemoryStore struct {
	cfg        MemoryConfig
	emb        Embedder
	tax        *Taxonomy
	cls        Classifier
	neighbours map[Label][]Label
	entries    []MemoryEntry
	parts      map[string]map[Label][]int // user → label → entry indexes
}

// BuildMemory builds a store from entries with the taxonomy and classifier
// named in cfg (cfg.Taxonomy, cfg.Classifier). Entries without an embedding
// are embedded with emb, entries without a label are classified.
func BuildMemory(ctx context.Context, cfg MemoryConfig, emb Embedder, entries []MemoryEntry, opts ...MemoryOption) (*MemoryStore, error) {
	tax, err := LoadTaxonomy(cfg.Taxonomy)
	if err != nil {
		return nil, err
	}
	cls, err := NewClassifier(ctx, cfg, tax, emb)
	if err != nil {
		return nil, err
	}
	return NewMemoryStore(ctx, cfg, emb, tax, cls, entries, opts...)
}

// MemoryOption adjusts building a store.
type MemoryOption func(*memoryOptions)

type memoryOptions struct {
	progress func(stage string, done, total int)
}

// WithProgress reports building progress: stage is "embed" or "classify".
func WithProgress(fn func(stage string, done, total int)) MemoryOption {
	return func(o *memoryOptions) { o.progress = fn }
}

// NewClassifier builds the classifier cfg.Classifier names.
func NewClassifier(ctx context.Context, cfg MemoryConfig, tax *Taxonomy, emb Embedder) (Classifier, error) {
	switch cfg.Classifier {
	case "", "embedding":
		return NewEmbeddingClassifier(ctx, tax, emb)
	case "ollama":
		return NewOllamaClassifier(cfg.ClassifierURL, cfg.ClassifierModel, tax)
	default:
		return nil, fmt.Errorf("memory classifier %q: want embedding or ollama", cfg.Classifier)
	}
}

// NewMemoryStore is BuildMemory with an explicit taxonomy and classifier.
func NewMemoryStore(ctx context.Context, cfg MemoryConfig, emb Embedder, tax *Taxonomy, cls Classifier, entries []MemoryEntry, opts ...MemoryOption) (*MemoryStore, error) {
	var o memoryOptions
	for _, opt := range opts {
		opt(&o)
	}
	report := func(stage string, done, total int) {
		if o.progress != nil && total > 0 {
			o.progress(stage, done, total)
		}
	}
	labelVecs, err := emb.Embed(ctx, tax.labelTexts())
	if err != nil {
		return nil, fmt.Errorf("embed taxonomy labels: %w", err)
	}
	m := &MemoryStore{cfg: cfg, emb: emb, tax: tax, cls: cls,
		neighbours: labelNeighbours(tax.Labels(), labelVecs),
		entries:    slices.Clone(entries), parts: map[string]map[Label][]int{}}
	var toEmbed, toClassify []int
	for i, e := range m.entries {
		if strings.TrimSpace(e.Query) == "" {
			return nil, fmt.Errorf("memory entry %d (user %q): empty query", i, e.User)
		}
		if len(e.Embedding) == 0 {
			toEmbed = append(toEmbed, i)
		}
		if e.Topic == "" && e.Subtopic == "" {
			toClassify = append(toClassify, i)
		}
	}
	const batch = 256
	for start := 0; start < len(toEmbed); start += batch {
		idx := toEmbed[start:min(start+batch, len(toEmbed))]
		texts := make([]string, len(idx))
		for j, i := range idx {
			texts[j] = m.entries[i].Query
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			return nil, fmt.Errorf("embed memories: %w", err)
		}
		for j, i := range idx {
			m.entries[i].Embedding = vecs[j]
		}
		report("embed", start+len(idx), len(toEmbed))
	}
	// small batches: an LLM classifier takes one request per text, and
	// progress should move
	for start := 0; start < len(toClassify); start += 16 {
		idx := toClassify[start:min(start+16, len(toClassify))]
		texts := make([]string, len(idx))
		vecs := make([][]float32, len(idx))
		for j, i := range idx {
			texts[j], vecs[j] = m.entries[i].Query, m.entries[i].Embedding
		}
		labels, err := cls.Classify(ctx, texts, vecs)
		if err != nil {
			return nil, fmt.Errorf("classify memories: %w", err)
		}
		for j, i := range idx {
			m.entries[i].Topic, m.entries[i].Subtopic = labels[j].Topic, labels[j].Subtopic
		}
		report("classify", start+len(idx), len(toClassify))
	}
	dim := 0
	for i, e := range m.entries {
		l := Label{Topic: e.Topic, Subtopic: e.Subtopic}
		if !tax.Has(l) {
			return nil, fmt.Errorf("memory entry %d (user %q, query %q): label %s is not in the taxonomy", i, e.User, e.Query, l)
		}
		if dim == 0 {
			dim = len(e.Embedding)
		}
		if len(e.Embedding) != dim {
			return nil, fmt.Errorf("memory entry %d: embedding dimension %d, others have %d", i, len(e.Embedding), dim)
		}
		if m.parts[e.User] == nil {
			m.parts[e.User] = map[Label][]int{}
		}
		m.parts[e.User][l] = append(m.parts[e.User][l], i)
	}
	return m, nil
}

// Len is the number of stored queries.
func (m *MemoryStore) Len() int { return len(m.entries) }

// Entries returns the stored entries (callers must not modify them).
func (m *MemoryStore) Entries() []MemoryEntry { return m.entries }

// Taxonomy returns the store's taxonomy.
func (m *MemoryStore) Taxonomy() *Taxonomy { return m.tax }

// Embedder returns the embedder whose space the memories live in.
func (m *MemoryStore) Embedder() Embedder { return m.emb }

// Partitions returns, for a user, the number of memories per label.
func (m *MemoryStore) Partitions(user string) map[Label]int {
	out := map[Label]int{}
	for l, idx := range m.parts[user] {
		out[l] = len(idx)
	}
	return out
}

// sameQuery is the test for "a memory whose text equals the current query":
// case and whitespace differences do not make it a different query.
func sameQuery(a, b string) bool {
	return strings.EqualFold(strings.Join(strings.Fields(a), " "), strings.Join(strings.Fields(b), " "))
}

// Activate selects H_n for a user's current query: classify it, take its
// partition, widen to neighbouring partitions (nearest first) while fewer
// than cfg.MinPartition memories are available, drop memories equal to the
// query itself, and keep the top cfg.TopN by cosine with the query (ties:
// more recent first, then query text). qvec is the query's embedding. It
// returns the activated memories and their embeddings.
func (m *MemoryStore) Activate(ctx context.Context, user, query string, qvec []float32) ([]Memory, [][]float32, error) {
	return m.ActivateBefore(ctx, user, query, qvec, time.Time{})
}

// ActivateBefore is Activate restricted to memories strictly older than
// before (the zero time means no restriction): evaluating turn k of a
// conversation must not activate what the user asks later.
func (m *MemoryStore) ActivateBefore(ctx context.Context, user, query string, qvec []float32, before time.Time) ([]Memory, [][]float32, error) {
	userParts := m.parts[user]
	if len(userParts) == 0 || m.cfg.TopN <= 0 {
		return nil, nil, nil
	}
	labels, err := m.cls.Classify(ctx, []string{query}, [][]float32{qvec})
	if err != nil {
		return nil, nil, fmt.Errorf("activate memory: %w", err)
	}
	l := labels[0]
	var pool []int
	take := func(lb Label) {
		for _, i := range userParts[lb] {
			if !before.IsZero() && !m.entries[i].Time.Before(before) {
				continue
			}
			if !sameQuery(m.entries[i].Query, query) {
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
		i   int
		sim float64
	}
	cs := make([]cand, len(pool))
	for j, i := range pool {
		cs[j] = cand{i, Cosine(qvec, m.entries[i].Embedding)}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.sim > b.sim:
			return -1
		case a.sim < b.sim:
			return 1
		}
		ea, eb := m.entries[a.i], m.entries[b.i]
		if c := eb.Time.Compare(ea.Time); c != 0 {
			return c
		}
		return strings.Compare(ea.Query, eb.Query)
	})
	cs = cs[:min(len(cs), m.cfg.TopN)]
	mems := make([]Memory, len(cs))
	vecs := make([][]float32, len(cs))
	for j, c := range cs {
		e := m.entries[c.i]
		mems[j] = Memory{Query: e.Query, Topic: e.Topic, Subtopic: e.Subtopic, Sim: c.sim}
		vecs[j] = e.Embedding
	}
	return mems, vecs, nil
}

// Rerank is HiMeS's memory-aware re-ranking: score(c) = mean over h in H_n
// of cos(E(c), E(h)). With retrievalWeight w > 0 the final score is
// (1−w)·memory + w·retrieval, the retrieval score min–max normalized over the
// candidates (all-equal scores normalize to 1) — an ablation, off by
// default. Ties keep retrieval order. With no memories the candidates are
// returned unchanged, in retrieval order.
func Rerank(cands []Ranked, candVecs [][]float32, memVecs [][]float32, retrievalWeight float64) ([]Ranked, error) {
	if len(candVecs) != len(cands) {
		return nil, errors.New("rerank: one vector per candidate required")
	}
	out := slices.Clone(cands)
	if len(memVecs) == 0 {
		return out, nil
	}
	lo, hi := 0.0, 0.0
	for i, c := range cands {
		if i == 0 || c.Score < lo {
			lo = c.Score
		}
		if i == 0 || c.Score > hi {
			hi = c.Score
		}
	}
	for i := range out {
		mem := 0.0
		for _, h := range memVecs {
			mem += Cosine(candVecs[i], h)
		}
		mem /= float64(len(memVecs))
		score := mem
		if retrievalWeight > 0 {
			norm := 1.0
			if hi > lo {
				norm = (cands[i].Score - lo) / (hi - lo)
			}
			score = (1-retrievalWeight)*mem + retrievalWeight*norm
		}
		out[i].Score = score
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out, nil
}
