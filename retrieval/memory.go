package retrieval

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/words"
)

// MemoryEntry is one long-term memory of a user: a statement about
// themselves (a fact) or a question they asked. Topic/Subtopic, Entities and
// Embedding may be left empty when building: BuildMemory fills them.
type MemoryEntry struct {
	User string
	// ID names the memory within its user (labels of relevant memories use
	// it); "" is filled with "m<position>" when building.
	ID   string
	Text string
	Time time.Time
	// Seq is the memory's position in its user's question history when it
	// is a question from the conversations (1, 2, …): a turn may activate
	// only memories with a smaller Seq. 0: not a question of the
	// conversations (a fact, an imported memory), visible at every turn.
	Seq      int64
	Topic    string
	Subtopic string
	// Importance in [0, 1] (0 when the source gives none).
	Importance float64
	// Entities are the memory's salient terms, lowercase; when none are
	// given, its content words (function words removed).
	Entities  []string
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
	ids := map[[2]string]int{}
	for i := range m.entries {
		e := &m.entries[i]
		if strings.TrimSpace(e.Text) == "" {
			return nil, fmt.Errorf("memory entry %d (user %q): empty text", i, e.User)
		}
		if e.ID == "" {
			e.ID = fmt.Sprintf("m%d", i+1)
		}
		if first, dup := ids[[2]string{e.User, e.ID}]; dup {
			return nil, fmt.Errorf("memory entry %d (user %q): id %q already names entry %d", i, e.User, e.ID, first)
		}
		ids[[2]string{e.User, e.ID}] = i
		if e.Importance < 0 || e.Importance > 1 || math.IsNaN(e.Importance) {
			return nil, fmt.Errorf("memory entry %d (user %q, id %q): importance %v not in [0, 1]", i, e.User, e.ID, e.Importance)
		}
		if e.Entities == nil {
			e.Entities = contentWords(e.Text)
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
			texts[j] = m.entries[i].Text
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
			texts[j], vecs[j] = m.entries[i].Text, m.entries[i].Embedding
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
			return nil, fmt.Errorf("memory entry %d (user %q, id %q): label %s is not in the taxonomy", i, e.User, e.ID, l)
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

// HasUser reports whether the store holds memories of user.
func (m *MemoryStore) HasUser(user string) bool { return len(m.parts[user]) > 0 }

// Lookup returns the memory of user with id.
func (m *MemoryStore) Lookup(user, id string) (MemoryEntry, bool) {
	for _, idx := range m.parts[user] {
		for _, i := range idx {
			if m.entries[i].ID == id {
				return m.entries[i], true
			}
		}
	}
	return MemoryEntry{}, false
}

// Activate selects H_n for a user's current query with every memory of the
// user visible (see ActivateAt).
func (m *MemoryStore) Activate(ctx context.Context, user, query string, qvec []float32) ([]Memory, [][]float32, error) {
	return m.ActivateAt(ctx, user, query, qvec, 0)
}

// ActivateAt selects H_n for a user's current query: classify it, take its
// partition, widen to neighbouring partitions (nearest first) while fewer
// than cfg.MinPartition memories are available, drop memories equal to the
// query itself, score each by cfg.Signals (see MemoryScore) and keep the
// top cfg.TopN (ties: more recent first, then id). qvec is the query's
// embedding. seq is the query's position in its user's question history:
// question memories with Seq ≥ seq are not visible (the turn's own and
// later questions); 0 means no restriction and no recency. It returns the
// activated memories and their embeddings.
func (m *MemoryStore) ActivateAt(ctx context.Context, user, query string, qvec []float32, seq int64) ([]Memory, [][]float32, error) {
	return m.activate(ctx, user, query, qvec, seq, m.cfg.Signals)
}

func (m *MemoryStore) activate(ctx context.Context, user, query string, qvec []float32, seq int64, sig MemorySignals) ([]Memory, [][]float32, error) {
	if sig == (MemorySignals{}) {
		sig.Semantic = 1
	}
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
			e := &m.entries[i]
			if seq > 0 && e.Seq >= seq {
				continue
			}
			if !sameQuery(e.Text, query) {
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
	qwords := map[string]bool{}
	if sig.Entities != 0 {
		for _, w := range words.LowerFields(query) {
			qwords[w] = true
		}
	}
	type cand struct {
		i          int
		sim, score float64
	}
	cs := make([]cand, len(pool))
	for j, i := range pool {
		sim := Cosine(qvec, m.entries[i].Embedding)
		cs[j] = cand{i, sim, MemoryScore(sig, m.cfg.RecencyHalfLife, sim, l, seq, qwords, m.entries[i])}
	}
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		ea, eb := m.entries[a.i], m.entries[b.i]
		if c := cmp.Compare(eb.Seq, ea.Seq); c != 0 {
			return c
		}
		if c := eb.Time.Compare(ea.Time); c != 0 {
			return c
		}
		return strings.Compare(ea.ID, eb.ID)
	})
	cs = cs[:min(len(cs), m.cfg.TopN)]
	mems := make([]Memory, len(cs))
	vecs := make([][]float32, len(cs))
	for j, c := range cs {
		e := m.entries[c.i]
		mems[j] = Memory{ID: e.ID, Text: e.Text, Topic: e.Topic, Subtopic: e.Subtopic, Sim: c.sim, Score: c.score}
		vecs[j] = e.Embedding
	}
	return mems, vecs, nil
}

// MemoryScore is the activation score of memory e for a query classified as
// ql at position seq of its user's history, with query words qwords:
//
//	semantic·cos + topic·match + recency·0.5^(age/halfLife) + importance·e.Importance + entities·overlap
//
// match is 1 for the query's (topic, subtopic), 0.5 for its topic alone, 0
// otherwise; age is seq − e.Seq in questions, and the recency term is 0 for
// memories without a Seq (facts, imported memories) or without a query
// position; overlap is the share of e's entities among the query's words.
// A weight of 0 turns its signal off.
func MemoryScore(sig MemorySignals, halfLife float64, cos float64, ql Label, seq int64, qwords map[string]bool, e MemoryEntry) float64 {
	score := sig.Semantic * cos
	if sig.Topic != 0 {
		switch {
		case e.Topic == ql.Topic && e.Subtopic == ql.Subtopic:
			score += sig.Topic
		case e.Topic == ql.Topic:
			score += sig.Topic / 2
		}
	}
	if sig.Recency != 0 && seq > 0 && e.Seq > 0 && e.Seq < seq && halfLife > 0 {
		score += sig.Recency * math.Exp2(-float64(seq-e.Seq)/halfLife)
	}
	score += sig.Importance * e.Importance
	if sig.Entities != 0 && len(e.Entities) > 0 {
		n := 0
		for _, w := range e.Entities {
			if qwords[w] {
				n++
			}
		}
		score += sig.Entities * float64(n) / float64(len(e.Entities))
	}
	return score
}

// contentWords are the distinct lowercase words of text without function
// words, in order: a memory's entities when the source names none.
func contentWords(text string) []string {
	stop := words.FunctionWords()
	out := []string{}
	seen := map[string]bool{}
	for _, w := range words.LowerFields(text) {
		if !stop[w] && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
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
