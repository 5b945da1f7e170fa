package hser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
)

// Score carries every term, the weights and the total. JSON names are the
// ones `himes score` prints.
type Score struct {
	RougeP  float64 `json:"rougeL_p"`
	RougeR  float64 `json:"rougeL_r"`
	RougeF1 float64 `json:"rougeL_f1"`
	EM      float64 `json:"em"`       // 0 or 1
	SquadF1 float64 `json:"squad_f1"` // reported, not part of R
	Hit     float64 `json:"hit"`      // 0 or 1
	Alpha   float64 `json:"alpha"`
	Beta    float64 `json:"beta"`
	Reward  float64 `json:"reward"` // RougeF1 + Alpha*EM + Beta*Hit
}

// Reward is the HSER total R = F1 + α·EM + β·Hit, evaluated left to right
// ((F1 + α·EM) + β·Hit) so every caller gets the same bits.
func (w Weights) Reward(rougeF1, em, hit float64) float64 {
	return rougeF1 + w.Alpha*em + w.Beta*hit
}

// Scorer computes the HSER reward. It is safe for concurrent use; each call
// borrows a scratch buffer set from a pool, so steady-state scoring does not
// allocate.
type Scorer struct {
	cfg     Config
	unicode bool
	gold    bool
	pool    sync.Pool
}

// NewScorer validates cfg and returns a scorer for it.
func NewScorer(cfg Config) (*Scorer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reward config: %w", err)
	}
	s := &Scorer{cfg: cfg, unicode: cfg.Tokenizer == TokenizerUnicode, gold: cfg.Hit == HitGold}
	s.pool.New = func() any { return new(scratch) }
	return s, nil
}

// Config returns the scorer's configuration.
func (s *Scorer) Config() Config { return s.cfg }

// scratch is one call's reusable memory.
type scratch struct {
	buf            []byte // token bytes
	pred, ref      []span
	predID, refID  []int32
	tab            internTable
	peq, v         []uint64
	counts         []int32
	stem           stemmer
	tmp            []byte
	normA, normRef []byte // normalized answers (EM, F1, Hit)
	normC          []byte // a normalized context chunk
	nspan          []span
}

// Score scores prediction against reference; context is the retrieved
// content (chunk texts) that Hit looks in.
//
// Rouge-L P, R and F1 are rouge-score's: P = LCS/len(pred), R =
// LCS/len(ref), F1 = 2·P·R/(P+R) in that order, and 0 when either side has
// no tokens. EM and the SQuAD F1 use SQuAD v1.1's normalize_answer with the
// rouge-score tokenizer and its unicode variant with the unicode tokenizer
// (unicode tokens, not stemmed, without the articles a, an, the). Hit is 1
// when the normalized answer — the prediction, or with Hit "gold" the
// reference — is non-empty and occurs as a whole run of normalized tokens in
// some chunk of context.
func (s *Scorer) Score(prediction, reference string, context []string) Score {
	sc := s.pool.Get().(*scratch)
	defer s.pool.Put(sc)

	out := Score{Alpha: s.cfg.Alpha, Beta: s.cfg.Beta}
	out.RougeP, out.RougeR, out.RougeF1 = s.rouge(sc, prediction, reference)

	if s.unicode && !s.cfg.Stem {
		// The unicode normalization is the Rouge tokens minus articles:
		// reuse the ids rouge just interned.
		out.EM, out.SquadF1 = s.unicodeEMF1(sc)
		if len(context) > 0 {
			sc.normA = s.normalize(sc, sc.normA[:0], prediction)
			sc.normRef = s.normalize(sc, sc.normRef[:0], reference)
		}
	} else {
		// Normalized answers: token strings joined by single spaces.
		sc.normA = s.normalize(sc, sc.normA[:0], prediction)
		sc.normRef = s.normalize(sc, sc.normRef[:0], reference)
		if bytes.Equal(sc.normA, sc.normRef) {
			out.EM = 1
		}
		out.SquadF1 = tokenF1(sc, sc.normA, sc.normRef)
	}

	if len(context) > 0 {
		answer := sc.normA
		if s.gold {
			answer = sc.normRef
		}
		if len(answer) > 0 {
			for _, chunk := range context {
				sc.normC = s.normalize(sc, sc.normC[:0], chunk)
				if containsTokens(sc.normC, answer) {
					out.Hit = 1
					break
				}
			}
		}
	}
	out.Reward = s.cfg.Weights.Reward(out.RougeF1, out.EM, out.Hit)
	return out
}

// unicodeEMF1 computes EM and token F1 from the interned Rouge tokens of the
// last rouge call, leaving out the articles.
func (s *Scorer) unicodeEMF1(sc *scratch) (em, f1 float64) {
	if len(sc.pred) == 0 || len(sc.ref) == 0 {
		// rouge did not intern; at most one side has tokens.
		np, nr := countNonArticles(sc.buf, sc.pred), countNonArticles(sc.buf, sc.ref)
		if np == 0 && nr == 0 {
			return 1, 0
		}
		return 0, 0
	}
	t := &sc.tab
	sc.counts = resize(sc.counts, 2*t.n) // [0,n): article flag, [n,2n): counts
	art, counts := sc.counts[:t.n], sc.counts[t.n:]
	clear(counts)
	const a, an, the = 'a', 'a' | 'n'<<8, 't' | 'h'<<8 | 'e'<<16 // packed little-endian
	for id, k := range t.keys {
		art[id] = 0
		if p := k.packed; (p == a || p == an || p == the) && k.end-k.start == int32(bits.Len64(p)+7)/8 {
			art[id] = 1
		}
	}
	np, nr := 0, 0
	for _, id := range sc.refID {
		if art[id] == 0 {
			counts[id]++
			nr++
		}
	}
	em = 1
	same, j := 0, 0
	for _, id := range sc.predID {
		if art[id] != 0 {
			continue
		}
		np++
		// EM: the non-article sequences are equal.
		for j < len(sc.refID) && art[sc.refID[j]] != 0 {
			j++
		}
		if j >= len(sc.refID) || sc.refID[j] != id {
			em = 0
		}
		j++
		if counts[id] > 0 {
			counts[id]--
			same++
		}
	}
	if np != nr {
		em = 0
	}
	if same == 0 {
		return em, 0
	}
	p := 1.0 * float64(same) / float64(np)
	r := 1.0 * float64(same) / float64(nr)
	return em, (2 * p * r) / (p + r)
}

func countNonArticles(buf []byte, spans []span) int {
	n := 0
	for _, sp := range spans {
		if !isArticle(buf[sp.start:sp.end]) {
			n++
		}
	}
	return n
}

// Tokens returns the Rouge-L tokens of text under the scorer's tokenizer
// and stemming (for inspection and tests).
func (s *Scorer) Tokens(text string) []string {
	var buf []byte
	var st stemmer
	spans := s.tokenize(&buf, nil, text, s.cfg.Stem, &st)
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = string(buf[sp.start:sp.end])
	}
	return out
}

// Normalize returns the normalized answer EM, F1 and Hit compare: SQuAD's
// normalize_answer with the rouge-score tokenizer, the unicode variant with
// the unicode tokenizer.
func (s *Scorer) Normalize(text string) string {
	sc := s.pool.Get().(*scratch)
	defer s.pool.Put(sc)
	return string(s.normalize(sc, nil, text))
}

func (s *Scorer) tokenize(buf *[]byte, spans []span, text string, stem bool, st *stemmer) []span {
	if s.unicode {
		*buf, spans = appendUnicodeTokens(*buf, spans, text, stem, st)
	} else {
		*buf, spans = appendRougeTokens(*buf, spans, text, stem, st)
	}
	return spans
}

func (s *Scorer) rouge(sc *scratch, prediction, reference string) (p, r, f float64) {
	sc.buf = sc.buf[:0]
	sc.pred = s.tokenize(&sc.buf, sc.pred[:0], prediction, s.cfg.Stem, &sc.stem)
	sc.ref = s.tokenize(&sc.buf, sc.ref[:0], reference, s.cfg.Stem, &sc.stem)
	if len(sc.pred) == 0 || len(sc.ref) == 0 {
		return 0, 0, 0
	}
	sc.tab.reset(len(sc.pred) + len(sc.ref))
	sc.buf = withSlack(sc.buf)
	sc.predID = sc.tab.intern(sc.predID[:0], sc.buf, sc.pred)
	sc.refID = sc.tab.intern(sc.refID[:0], sc.buf, sc.ref)
	var lcs int
	lcs, sc.peq, sc.v = lcsBits(sc.predID, sc.refID, sc.tab.n, sc.peq, sc.v)
	p = float64(lcs) / float64(len(sc.pred))
	r = float64(lcs) / float64(len(sc.ref))
	return p, r, fmeasure(p, r)
}

// fmeasure is rouge-score's scoring.fmeasure, same evaluation order.
func fmeasure(p, r float64) float64 {
	if p+r > 0 {
		return 2 * p * r / (p + r)
	}
	return 0
}

// normalize appends the normalized form of text to dst.
func (s *Scorer) normalize(sc *scratch, dst []byte, text string) []byte {
	if !s.unicode {
		return appendSQuADNormalized(dst, text, &sc.tmp)
	}
	// Unicode variant: unicode tokens (unstemmed) minus English articles.
	sc.tmp = sc.tmp[:0]
	sc.nspan = s.tokenize(&sc.tmp, sc.nspan[:0], text, false, &sc.stem)
	start := len(dst)
	for _, sp := range sc.nspan {
		w := sc.tmp[sp.start:sp.end]
		if isArticle(w) {
			continue
		}
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, w...)
	}
	return dst
}

// tokenF1 is SQuAD's f1_score over space-separated normalized answers:
// multiset overlap, 0 when nothing overlaps (so two empty answers give 0).
func tokenF1(sc *scratch, pred, ref []byte) float64 {
	sc.buf = append(sc.buf[:0], pred...)
	sc.pred = splitSpaces(sc.pred[:0], sc.buf, 0)
	off := len(sc.buf)
	sc.buf = append(sc.buf, ref...)
	sc.ref = splitSpaces(sc.ref[:0], sc.buf, off)
	if len(sc.pred) == 0 || len(sc.ref) == 0 {
		return 0
	}
	sc.tab.reset(len(sc.pred) + len(sc.ref))
	sc.buf = withSlack(sc.buf)
	sc.predID = sc.tab.intern(sc.predID[:0], sc.buf, sc.pred)
	sc.refID = sc.tab.intern(sc.refID[:0], sc.buf, sc.ref)
	sc.counts = resize(sc.counts, sc.tab.n)
	clear(sc.counts)
	for _, id := range sc.refID {
		sc.counts[id]++
	}
	same := 0
	for _, id := range sc.predID {
		if sc.counts[id] > 0 {
			sc.counts[id]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := 1.0 * float64(same) / float64(len(sc.pred))
	r := 1.0 * float64(same) / float64(len(sc.ref))
	return (2 * p * r) / (p + r)
}

// splitSpaces appends the spans of the ' '-separated fields of buf[off:].
func splitSpaces(spans []span, buf []byte, off int) []span {
	for start := off; start < len(buf); {
		end := len(buf)
		if i := bytes.IndexByte(buf[start:], ' '); i >= 0 {
			end = start + i
		}
		if end > start {
			spans = append(spans, span{int32(start), int32(end)})
		}
		start = end + 1
	}
	return spans
}

// containsTokens reports whether the normalized answer occurs in the
// normalized chunk on token boundaries (both are single-space joined).
func containsTokens(chunk, answer []byte) bool {
	for off := 0; off+len(answer) <= len(chunk); {
		i := bytes.Index(chunk[off:], answer)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(answer)
		if (i == 0 || chunk[i-1] == ' ') && (end == len(chunk) || chunk[end] == ' ') {
			return true
		}
		off = i + 1
	}
	return false
}

// internTable maps token bytes to dense ids for one call: open addressing,
// keys stored as spans into the caller's buffer. Ids are assigned in order of
// first occurrence, so they do not depend on the (random) hash seed.
type internTable struct {
	slots []internSlot
	keys  []internKey // id → its first occurrence
	n     int
	mask  uint64
}

// internSlot is one hash-table entry; packed and n let most lookups finish
// without touching keys or the token bytes.
type internSlot struct {
	packed uint64
	n      int32
	id1    int32 // id+1, 0 = empty
}

// internKey is a token's span; packed holds the bytes of a token of at most
// 8 bytes, little-endian, so most comparisons are one integer compare.
type internKey struct {
	span
	packed uint64
}

func (t *internTable) reset(tokens int) {
	size := 16
	for size < 2*tokens {
		size <<= 1
	}
	t.slots = resize(t.slots, size)
	clear(t.slots)
	t.keys = t.keys[:0]
	t.n = 0
	t.mask = uint64(size - 1)
}

// withSlack makes sure 8 bytes past len(buf) are addressable, so intern can
// load any short token as one 64-bit word.
func withSlack(buf []byte) []byte {
	n := len(buf)
	return append(buf, 0, 0, 0, 0, 0, 0, 0, 0)[:n]
}

// intern appends the ids of spans (tokens of buf, which must have 8 bytes of
// slack, see withSlack).
func (t *internTable) intern(ids []int32, buf []byte, spans []span) []int32 {
	slots, keys, mask := t.slots, t.keys, t.mask
	full := buf[:cap(buf)]
	for _, sp := range spans {
		n := int(sp.end - sp.start)
		var packed, h uint64
		if n <= 8 {
			packed = binary.LittleEndian.Uint64(full[sp.start:]) & (^uint64(0) >> (64 - 8*uint(n)))
			hi, lo := bits.Mul64(packed^uint64(n)<<59, 0x9E3779B97F4A7C15)
			h = hi ^ lo
		} else {
			h = hashToken(buf[sp.start:sp.end])
		}
		for i := h & mask; ; i = (i + 1) & mask {
			sl := &slots[i]
			if sl.id1 == 0 {
				keys = append(keys, internKey{sp, packed})
				*sl = internSlot{packed, int32(n), int32(len(keys))}
				ids = append(ids, int32(len(keys)-1))
				break
			}
			if sl.packed == packed && int(sl.n) == n {
				if k := keys[sl.id1-1]; n <= 8 || string(buf[k.start:k.end]) == string(buf[sp.start:sp.end]) {
					ids = append(ids, sl.id1-1)
					break
				}
			}
		}
	}
	t.keys, t.n = keys, len(keys)
	return ids
}

// hashToken is a fast non-cryptographic hash for short tokens: 8 bytes at a
// time, multiply-xorshift mixing. Collisions only cost a probe (keys are
// compared byte for byte).
func hashToken(w []byte) uint64 {
	const m = 0x9E3779B97F4A7C15
	h := uint64(len(w)) * m
	for len(w) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(w)) * m
		h ^= h >> 29
		w = w[8:]
	}
	var x uint64
	for i, c := range w {
		x |= uint64(c) << (8 * uint(i))
	}
	hi, lo := bits.Mul64(h^x, m)
	return hi ^ lo
}
