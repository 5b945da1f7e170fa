package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/words"
)

// Entry is one long-term memory of a user: a statement about
// themselves (a fact) or a question they asked. Topic/Subtopic, Entities and
// Embedding may be left empty when building: Build fills them.
type Entry struct {
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

// Activated is one activated long-term memory (an element of H_n): its id
// within the user, its text, label, cosine with the query (Sim) and
// activation score (Score, see Score).
type Activated struct {
	ID       string  `json:"id"`
	Text     string  `json:"text"`
	Topic    string  `json:"topic"`
	Subtopic string  `json:"subtopic"`
	Sim      float64 `json:"sim"`
	Score    float64 `json:"score"`
}

// Store is HiMeS long-term memory: every user's historical queries,
// partitioned by (topic, subtopic). It is immutable after building and safe
// for concurrent use.
type Store struct {
	cfg        Config
	emb        embedding.Embedder
	tax        *Taxonomy
	cls        Classifier
	neighbours map[Label][]Label
	entries    []Entry
	parts      map[string]map[Label][]int // user → label → entry indexes
	// The scan layout: every partition's memories side by side (scan
	// position p holds entry order[p]; span[user][label] is its partition's
	// range), with what activation reads of each in flat arrays, so a query
	// streams through memory instead of chasing one pointer per memory.
	order []int
	span  map[string]map[Label][2]int
	dim   int
	vecs  []float32 // embeddings, dim per position; nil when quantized
	norms []float64 // squared norms of vecs
	seqs  []int64
	fold  []uint64 // foldHash of the collapsed text: the same-query test
	keys  []string // per entry: the text with whitespace collapsed
	// quant, when set, holds the embeddings quantized, in scan order:
	// activation scores from the codes (see Quantized)
	quant *QuantSet
	// lex is BM25 over the memories, for Config.Fusion (nil with none)
	lex *lexIndex
}

// Build builds a store from entries with the taxonomy and classifier
// named in cfg (cfg.Taxonomy, cfg.Classifier). Entries without an embedding
// are embedded with emb, entries without a label are classified.
func Build(ctx context.Context, cfg Config, emb embedding.Embedder, entries []Entry, opts ...Option) (*Store, error) {
	tax, err := LoadTaxonomy(cfg.Taxonomy)
	if err != nil {
		return nil, err
	}
	cls, err := NewClassifier(ctx, cfg, tax, emb)
	if err != nil {
		return nil, err
	}
	return NewStore(ctx, cfg, emb, tax, cls, entries, opts...)
}

// Option adjusts building a store.
type Option func(*options)

type options struct {
	progress func(stage string, done, total int)
}

// WithProgress reports building progress: stage is "embed" or "classify".
func WithProgress(fn func(stage string, done, total int)) Option {
	return func(o *options) { o.progress = fn }
}

// NewClassifier builds the classifier cfg.Classifier names.
func NewClassifier(ctx context.Context, cfg Config, tax *Taxonomy, emb embedding.Embedder) (Classifier, error) {
	switch cfg.Classifier {
	case "", "embedding":
		return NewEmbeddingClassifier(ctx, tax, emb)
	case "ollama":
		return NewOllamaClassifier(cfg.ClassifierURL, cfg.ClassifierModel, tax)
	default:
		return nil, fmt.Errorf("memory classifier %q: want embedding or ollama", cfg.Classifier)
	}
}

// NewStore is Build with an explicit taxonomy and classifier.
func NewStore(ctx context.Context, cfg Config, emb embedding.Embedder, tax *Taxonomy, cls Classifier, entries []Entry, opts ...Option) (*Store, error) {
	var o options
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
	m := &Store{cfg: cfg, emb: emb, tax: tax, cls: cls,
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
		vecs, err := embedding.EmbedAs(ctx, emb, embedding.RoleMemory, texts)
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
	m.keys = make([]string, len(m.entries))
	for i, e := range m.entries {
		m.keys[i] = collapseSpace(e.Text)
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
	m.layout(dim)
	if cfg.Fusion != "" && cfg.Fusion != FusionNone {
		m.lex = newLexIndex(m.entries)
	}
	return m, nil
}

// layout lays the partitions out for scanning (see Store.order) and
// points each entry's embedding into the flat copy, so it is stored once.
func (m *Store) layout(dim int) {
	n := len(m.entries)
	m.dim, m.order, m.span = dim, make([]int, 0, n), map[string]map[Label][2]int{}
	m.vecs, m.norms = make([]float32, n*dim), make([]float64, n)
	m.seqs, m.fold = make([]int64, n), make([]uint64, n)
	users := slices.Sorted(maps.Keys(m.parts))
	for _, u := range users {
		m.span[u] = map[Label][2]int{}
		labels := slices.SortedFunc(maps.Keys(m.parts[u]), func(a, b Label) int {
			return cmp.Or(strings.Compare(a.Topic, b.Topic), strings.Compare(a.Subtopic, b.Subtopic))
		})
		for _, l := range labels {
			lo := len(m.order)
			for _, i := range m.parts[u][l] {
				p := len(m.order)
				m.order = append(m.order, i)
				v := m.vecs[p*dim : (p+1)*dim : (p+1)*dim]
				copy(v, m.entries[i].Embedding)
				m.entries[i].Embedding = v
				m.norms[p] = sqNorm(v)
				m.seqs[p] = m.entries[i].Seq
				m.fold[p] = foldHash(m.keys[i])
			}
			m.span[u][l] = [2]int{lo, len(m.order)}
		}
	}
}

// foldHash is FNV-1a of s with every rune replaced by the smallest rune of
// its Unicode simple-folding orbit: strings.EqualFold(a, b) implies
// foldHash(a) == foldHash(b).
func foldHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for _, r := range s {
		lo := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			lo = min(lo, f)
		}
		h ^= uint64(lo)
		h *= 1099511628211
	}
	return h
}

// Len is the number of stored queries.
func (m *Store) Len() int { return len(m.entries) }

// Entries returns the stored entries (callers must not modify them).
func (m *Store) Entries() []Entry { return m.entries }

// Taxonomy returns the store's taxonomy.
func (m *Store) Taxonomy() *Taxonomy { return m.tax }

// Embedder returns the embedder whose space the memories live in.
func (m *Store) Embedder() embedding.Embedder { return m.emb }

// Partitions returns, for a user, the number of memories per label.
func (m *Store) Partitions(user string) map[Label]int {
	out := map[Label]int{}
	for l, idx := range m.parts[user] {
		out[l] = len(idx)
	}
	return out
}

// Quantized returns a copy of the store with every memory embedding
// quantized by q and the float32 embeddings dropped (its entries carry
// none): activation scores the codes against the query (see QuantSet), and
// the activated memories' vectors, which re-rank the candidates, are decoded
// then. Everything else (labels, partitions, texts) is shared with m.
func (m *Store) Quantized(q *Quantizer) (*Store, error) {
	vecs := make([][]float32, len(m.order))
	for p := range m.order {
		vecs[p] = m.vecs[p*m.dim : (p+1)*m.dim]
	}
	qs, err := NewQuantSet(q, vecs)
	if err != nil {
		return nil, fmt.Errorf("quantize memories (%s): %w", q.Name(), err)
	}
	out := *m
	out.entries = slices.Clone(m.entries)
	for i := range out.entries {
		out.entries[i].Embedding = nil
	}
	out.vecs, out.norms = nil, nil
	out.quant = qs
	return &out, nil
}

// Quantizer returns the quantizer of a store made by Quantized (nil: the
// embeddings are float32).
func (m *Store) Quantizer() *Quantizer {
	if m.quant == nil {
		return nil
	}
	return m.quant.q
}

// collapseSpace is half of the test for "a memory whose text equals the
// current query" (EqualFold of both collapsed): case and whitespace
// differences do not make it a different query.
func collapseSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

func sqNorm(v []float32) float64 {
	n := 0.0
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	return n
}

// cosineNorm is embedding.Cosine(a, b) given |a|² and |b|², with the same arithmetic
// (so the same bits).
func cosineNorm(a []float32, na float64, b []float32, nb float64) float64 {
	if na == 0 || nb == 0 {
		return 0
	}
	dot := 0.0
	b = b[:len(a)]
	for i, x := range a {
		dot += float64(x) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

// HasUser reports whether the store holds memories of user.
func (m *Store) HasUser(user string) bool { return len(m.parts[user]) > 0 }

// Lookup returns the memory of user with id.
func (m *Store) Lookup(user, id string) (Entry, bool) {
	for _, idx := range m.parts[user] {
		for _, i := range idx {
			if m.entries[i].ID == id {
				return m.entries[i], true
			}
		}
	}
	return Entry{}, false
}

// Activate selects H_n for a user's current query with every memory of the
// user visible (see ActivateAt).
func (m *Store) Activate(ctx context.Context, user, query string, qvec []float32) ([]Activated, [][]float32, error) {
	return m.ActivateAt(ctx, user, query, qvec, 0)
}

// ActivateAt selects H_n for a user's current query: classify it, take its
// partition, widen to neighbouring partitions (nearest first) while fewer
// than cfg.MinPartition memories are available, drop memories equal to the
// query itself, score each by cfg.Signals (see Score) and keep the
// top cfg.TopN (ties: more recent first, then id). qvec is the query's
// embedding. seq is the query's position in its user's question history:
// question memories with Seq ≥ seq are not visible (the turn's own and
// later questions); 0 means no restriction and no recency. It returns the
// activated memories and their embeddings.
func (m *Store) ActivateAt(ctx context.Context, user, query string, qvec []float32, seq int64) ([]Activated, [][]float32, error) {
	return m.activate(ctx, user, query, qvec, seq, m.cfg.Signals, m.cfg.TopN)
}

// ActivateTop is ActivateAt keeping the top n memories by the signal
// weights sig instead of the store's top_n and signals (memories as
// rewriter input have their own top_n, and keep the run's signals under an
// evaluation's memory variants).
func (m *Store) ActivateTop(ctx context.Context, user, query string, qvec []float32, seq int64, sig Signals, n int) ([]Activated, error) {
	mems, _, err := m.activate(ctx, user, query, qvec, seq, sig, n)
	return mems, err
}

func (m *Store) activate(ctx context.Context, user, query string, qvec []float32, seq int64, sig Signals, topN int) ([]Activated, [][]float32, error) {
	if sig == (Signals{}) {
		sig.Semantic = 1
	}
	userParts := m.parts[user]
	if len(userParts) == 0 || topN <= 0 {
		return nil, nil, nil
	}
	labels, err := m.cls.Classify(ctx, []string{query}, [][]float32{qvec})
	if err != nil {
		return nil, nil, fmt.Errorf("activate memory: %w", err)
	}
	l := labels[0]
	qwords := map[string]bool{}
	if sig.Entities != 0 {
		for _, w := range words.LowerFields(query) {
			qwords[w] = true
		}
	}
	qkey, qn := collapseSpace(query), sqNorm(qvec)
	var qq *QuantQuery
	if m.quant != nil {
		if qq, err = m.quant.Prepare(qvec); err != nil {
			return nil, nil, fmt.Errorf("activate memory: %w", err)
		}
	}
	// The top TopN by (score, then more recent, then id): a total order, so
	// keeping the best few while scanning equals sorting the whole pool.
	type cand struct {
		i, p       int // entry index, scan position
		sim, score float64
	}
	semanticOnly := sig == Signals{Semantic: 1}
	before := func(a, b cand) bool {
		if a.score != b.score {
			return a.score > b.score
		}
		ea, eb := &m.entries[a.i], &m.entries[b.i]
		if ea.Seq != eb.Seq {
			return ea.Seq > eb.Seq
		}
		if c := ea.Time.Compare(eb.Time); c != 0 {
			return c > 0
		}
		return ea.ID < eb.ID
	}
	cs := make([]cand, 0, topN+1)
	pool := 0
	qfold := foldHash(qkey)
	spans := m.span[user]
	take := func(lb Label) {
		r := spans[lb]
		for p := r[0]; p < r[1]; p++ {
			if seq > 0 && m.seqs[p] >= seq || !admits(m.cfg.Sources, m.seqs[p]) {
				continue
			}
			i := m.order[p]
			if m.fold[p] == qfold && strings.EqualFold(m.keys[i], qkey) {
				continue
			}
			pool++
			var sim float64
			if qq != nil {
				sim = qq.Cosine(p)
			} else {
				sim = cosineNorm(qvec, qn, m.vecs[p*m.dim:(p+1)*m.dim], m.norms[p])
			}
			c := cand{i, p, sim, sim}
			if !semanticOnly { // else Score is 1·cos: the entry need not be read
				c.score = Score(sig, m.cfg.RecencyHalfLife, sim, l, seq, qwords, m.entries[i])
			}
			if m.lex != nil { // fused below, over every visible memory
				cs = append(cs, c)
				continue
			}
			if len(cs) == topN && !before(c, cs[len(cs)-1]) {
				continue
			}
			j := len(cs)
			cs = append(cs, c)
			for ; j > 0 && before(c, cs[j-1]); j-- {
				cs[j] = cs[j-1]
			}
			cs[j] = c
			cs = cs[:min(len(cs), topN)]
		}
	}
	take(l)
	for _, nb := range m.neighbours[l] {
		if pool >= max(m.cfg.MinPartition, 1) {
			break
		}
		take(nb)
	}
	if m.lex != nil {
		terms := m.lex.queryTerms(query)
		scores, lex := make([]float64, len(cs)), make([]float64, len(cs))
		for j, c := range cs {
			scores[j], lex[j] = c.score, m.lex.score(terms, c.i)
		}
		for j, f := range fuse(m.cfg, scores, lex) {
			cs[j].score = f
		}
		slices.SortFunc(cs, func(a, b cand) int {
			switch {
			case before(a, b):
				return -1
			case before(b, a):
				return 1
			}
			return 0
		})
		cs = cs[:min(len(cs), topN)]
	}
	mems := make([]Activated, len(cs))
	vecs := make([][]float32, len(cs))
	for j, c := range cs {
		e := m.entries[c.i]
		mems[j] = Activated{ID: e.ID, Text: e.Text, Topic: e.Topic, Subtopic: e.Subtopic, Sim: c.sim, Score: c.score}
		vecs[j] = e.Embedding
		if m.quant != nil {
			vecs[j] = m.quant.q.Decode(m.quant.Code(c.p))
		}
	}
	return mems, vecs, nil
}

// Score is the activation score of memory e for a query classified as
// ql at position seq of its user's history, with query words qwords:
//
//	semantic·cos + topic·match + recency·0.5^(age/halfLife) + importance·e.Importance + entities·overlap
//
// match is 1 for the query's (topic, subtopic), 0.5 for its topic alone, 0
// otherwise; age is seq − e.Seq in questions, and the recency term is 0 for
// memories without a Seq (facts, imported memories) or without a query
// position; overlap is the share of e's entities among the query's words.
// A weight of 0 turns its signal off.
func Score(sig Signals, halfLife float64, cos float64, ql Label, seq int64, qwords map[string]bool, e Entry) float64 {
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
