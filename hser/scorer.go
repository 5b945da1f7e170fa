package hser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Score carries every term, the weights and the total. JSON names are the
// ones `himes score` prints.
//
// EM is the reward's exact match, under the normalization of the reward's
// tokenizer (Config.EMNormalization): SQuAD's with "rouge-score", unicode
// tokens without articles with "unicode". SquadEM and SquadF1 are always the
// official SQuAD v1.1 script's numbers, whatever the tokenizer; they are
// reported, not part of R.
type Score struct {
	RougeP  float64 `json:"rougeL_p"`
	RougeR  float64 `json:"rougeL_r"`
	RougeF1 float64 `json:"rougeL_f1"`
	EM      float64 `json:"em"`       // 0 or 1, the reward's
	SquadEM float64 `json:"squad_em"` // 0 or 1, official SQuAD v1.1
	SquadF1 float64 `json:"squad_f1"` // official SQuAD v1.1
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
	chunks  chunkCache // normalized context chunks (Hit)
}

// NewScorer validates cfg and returns a scorer for it.
func NewScorer(cfg Config) (*Scorer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("reward config: %w", err)
	}
	s := &Scorer{cfg: cfg, unicode: cfg.Tokenizer == TokenizerUnicode, gold: cfg.Hit == HitGold,
		chunks: chunkCache{maxBytes: defaultChunkCacheBytes}}
	s.pool.New = func() any { return new(scratch) }
	return s, nil
}

// Config returns the scorer's configuration.
func (s *Scorer) Config() Config { return s.cfg }

// scratch is one call's reusable memory.
type scratch struct {
	buf           []byte // token bytes
	text          []byte // a copy of the input text, with slack for word loads
	pred, ref     []span
	predID, refID []int32
	tab           internTable
	k             int // fastRouge's number of distinct ids
	peq, v        []uint64
	counts        []int32
	stem          stemmer
	// The fast path's stemming (stemIDs): long stems' bytes, the stems'
	// table, and the stem id of each token id.
	stemBuf        []byte
	stemTab        internTable
	stemID         []int32
	tmp            []byte
	normA, normRef []byte // normalized answers (the reward's EM, Hit)
	sqA, sqRef     []byte // SQuAD-normalized answers (SQuAD EM and F1)
	normC          []byte // a normalized context chunk
	nspan          []span
	// The fused SQuAD path (squadFromRouge): whether the last fastRouge
	// ran on the texts themselves, where the prediction's tokens end in
	// tab.pos, and the SQuAD token ids of both sides.
	direct       bool
	predTokens   int
	predBuf      int // the end of the prediction's tokens in buf
	sqPID, sqRID []int32
}

// Score scores prediction against reference; context is the retrieved
// content (chunk texts) that Hit looks in.
//
// Rouge-L P, R and F1 are rouge-score's: P = LCS/len(pred), R =
// LCS/len(ref), F1 = 2·P·R/(P+R) in that order, and 0 when either side has
// no tokens. SquadEM and SquadF1 use SQuAD v1.1's normalize_answer, always.
// The reward's EM uses it too with the rouge-score tokenizer, and its
// unicode variant with the unicode tokenizer (unicode tokens, not stemmed,
// without the articles a, an, the: "2,000" and "2000" differ there). Hit is
// 1 when the answer normalized like EM — the prediction, or with Hit "gold"
// the reference — is non-empty and occurs as a whole run of normalized
// tokens in some chunk of context.
func (s *Scorer) Score(prediction, reference string, context []string) Score {
	sc := s.pool.Get().(*scratch)
	defer s.pool.Put(sc)

	out := Score{Alpha: s.cfg.Alpha, Beta: s.cfg.Beta}
	out.RougeP, out.RougeR, out.RougeF1 = s.rouge(sc, prediction, reference)

	if s.unicode && !s.cfg.Stem {
		// The unicode normalization is the Rouge tokens minus articles:
		// reuse the ids rouge just interned (before tokenF1 reuses them).
		out.EM = s.unicodeEM(sc)
	}
	// The official SQuAD numbers: normalized answers are token strings
	// joined by single spaces. On ASCII text the interned Rouge tokens give
	// them without normalizing again (squadFromRouge); the normalized
	// bytes are then only built where Hit needs them.
	fused := !s.cfg.Stem && sc.direct && s.squadFromRouge(sc, prediction, reference)
	if fused {
		out.SquadEM, out.SquadF1 = squadFromIDs(sc, sc.sqPID, sc.sqRID)
	} else {
		sc.sqA = appendSQuADNormalized(sc.sqA[:0], prediction, &sc.tmp)
		sc.sqRef = appendSQuADNormalized(sc.sqRef[:0], reference, &sc.tmp)
		if bytes.Equal(sc.sqA, sc.sqRef) {
			out.SquadEM = 1
		}
		out.SquadF1 = tokenF1(sc, sc.sqA, sc.sqRef)
	}
	switch {
	case !s.unicode:
		// The reward's normalization is SQuAD's.
		out.EM = out.SquadEM
		if len(context) > 0 {
			if fused {
				sc.normA = appendSQuADNormalized(sc.normA[:0], prediction, &sc.tmp)
				sc.normRef = appendSQuADNormalized(sc.normRef[:0], reference, &sc.tmp)
			} else {
				sc.normA = append(sc.normA[:0], sc.sqA...)
				sc.normRef = append(sc.normRef[:0], sc.sqRef...)
			}
		}
	case s.cfg.Stem:
		sc.normA = s.normalize(sc, sc.normA[:0], prediction)
		sc.normRef = s.normalize(sc, sc.normRef[:0], reference)
		if bytes.Equal(sc.normA, sc.normRef) {
			out.EM = 1
		}
	case len(context) > 0:
		sc.normA = s.normalize(sc, sc.normA[:0], prediction)
		sc.normRef = s.normalize(sc, sc.normRef[:0], reference)
	}

	if len(context) > 0 {
		answer := sc.normA
		if s.gold {
			answer = sc.normRef
		}
		if len(answer) > 0 {
			for _, chunk := range context {
				if containsTokens(s.normalizedChunk(sc, chunk), answer) {
					out.Hit = 1
					break
				}
			}
		}
	}
	out.Reward = s.cfg.Weights.Reward(out.RougeF1, out.EM, out.Hit)
	return out
}

// normalizedChunk is s.normalize(chunk), from the chunk cache when it was
// normalized before. The result must not be modified.
func (s *Scorer) normalizedChunk(sc *scratch, chunk string) []byte {
	if norm, ok := s.chunks.get(chunk); ok {
		return norm
	}
	sc.normC = s.normalize(sc, sc.normC[:0], chunk)
	norm := append([]byte(nil), sc.normC...)
	s.chunks.put(chunk, norm)
	return norm
}

// ScoreMulti scores a prediction against several reference answers as
// SQuAD v1.1 (metric_max_over_ground_truths: EM and F1 each the maximum over
// the references) and rouge-score (score_multi: Rouge-L P, R, F1 of the
// reference with the highest F1, the first on ties) do; Hit "gold" is 1 when
// some reference occurs in the context. The reward combines these terms.
// With one reference it equals Score; with none it scores against "".
func (s *Scorer) ScoreMulti(prediction string, references []string, context []string) Score {
	if len(references) <= 1 {
		ref := ""
		if len(references) == 1 {
			ref = references[0]
		}
		return s.Score(prediction, ref, context)
	}
	var out Score
	for i, ref := range references {
		sc := s.Score(prediction, ref, context)
		if i == 0 {
			out = sc
			continue
		}
		if sc.RougeF1 > out.RougeF1 {
			out.RougeP, out.RougeR, out.RougeF1 = sc.RougeP, sc.RougeR, sc.RougeF1
		}
		out.EM = max(out.EM, sc.EM)
		out.SquadEM = max(out.SquadEM, sc.SquadEM)
		out.SquadF1 = max(out.SquadF1, sc.SquadF1)
		out.Hit = max(out.Hit, sc.Hit)
	}
	out.Reward = s.cfg.Weights.Reward(out.RougeF1, out.EM, out.Hit)
	return out
}

// squadFromIDs is SQuAD's exact match and f1_score over token ids of one
// table (equal ids are equal tokens).
func squadFromIDs(sc *scratch, pred, ref []int32) (em, f1 float64) {
	if slices.Equal(pred, ref) {
		em = 1
	}
	if len(pred) == 0 || len(ref) == 0 {
		return em, 0
	}
	sc.counts = resize(sc.counts, sc.tab.n)
	clear(sc.counts)
	for _, id := range ref {
		sc.counts[id]++
	}
	same := 0
	for _, id := range pred {
		if sc.counts[id] > 0 {
			sc.counts[id]--
			same++
		}
	}
	if same == 0 {
		return em, 0
	}
	p := 1.0 * float64(same) / float64(len(pred))
	r := 1.0 * float64(same) / float64(len(ref))
	return em, (2 * p * r) / (p + r)
}

// unicodeEM computes the unicode EM from the interned Rouge tokens of the
// last rouge call, leaving out the articles.
func (s *Scorer) unicodeEM(sc *scratch) float64 {
	// Either side may be empty: then EM is 1 only if the other has nothing
	// but articles, as in SQuAD.
	// Articles have ids 0–2 (seedArticles): nonArticle is 0 for them and 1
	// otherwise, so the loops below need no data-dependent branches.
	nonArticle := func(id int32) int { return int((uint32(articleIDs-1) - uint32(id)) >> 31) }
	sc.counts = resize(sc.counts, sc.tab.n)
	counts := sc.counts
	clear(counts)
	nr := 0
	for _, id := range sc.refID {
		x := nonArticle(id)
		nr += x
		counts[id] += int32(x)
	}
	np, same := 0, 0
	for _, id := range sc.predID {
		np += nonArticle(id)
		// Take one of id from the reference's multiset if there is one
		// left (articles have count 0).
		c := counts[id]
		d := int32(uint32(-c) >> 31) // c ≥ 0; d = 1 if c > 0
		counts[id] = c - d
		same += int(d)
	}
	// EM: the sequences without articles are equal. They can only be if
	// they are the same multiset, which the counts just told.
	if np == nr && same == np && equalNonArticles(sc.predID, sc.refID) {
		return 1
	}
	return 0
}

// equalNonArticles reports whether a and b are equal once the articles
// (ids below articleIDs) are left out.
func equalNonArticles(a, b []int32) bool {
	i, j := 0, 0
	for {
		for i < len(a) && a[i] < articleIDs {
			i++
		}
		for j < len(b) && b[j] < articleIDs {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if a[i] != b[j] {
			return false
		}
		i++
		j++
	}
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

// Normalize returns the normalized answer the reward's EM and Hit compare:
// SQuAD's normalize_answer with the rouge-score tokenizer, the unicode
// variant with the unicode tokenizer (SquadEM and SquadF1 always use
// NormalizeAnswer).
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
	// On ASCII text both tokenizers make the same tokens: runs of [a-z0-9]
	// after lowercasing, stemmed when longer than 3 bytes if stemming is
	// on. They are tokenized and interned in one pass over a copy of the
	// text (fastRouge). Without stemming the scan itself tells whether the
	// text was ASCII; with stemming it is checked first, so that the stemmer
	// only ever sees ASCII words.
	sc.direct = false
	if !s.cfg.Stem || isASCII(prediction) && isASCII(reference) {
		sc.text = append(append(sc.text[:0], prediction...), reference...)
		if s.fastRouge(sc, len(prediction)) {
			sc.direct = true
			return s.rougeFromIDs(sc, sc.k)
		}
	}
	// Text whose only non-ASCII characters are separators (’ “ ” — … and
	// the like) has the tokens of its ASCII part: the fast path again.
	var ok1, ok2 bool
	sc.text, ok1 = appendSeparatorsBlanked(sc.text[:0], prediction)
	split := len(sc.text)
	sc.text, ok2 = appendSeparatorsBlanked(sc.text, reference)
	if ok1 && ok2 && s.fastRouge(sc, split) {
		return s.rougeFromIDs(sc, sc.k)
	}
	sc.buf = sc.buf[:0]
	sc.pred = s.tokenize(&sc.buf, sc.pred[:0], prediction, s.cfg.Stem, &sc.stem)
	sc.ref = s.tokenize(&sc.buf, sc.ref[:0], reference, s.cfg.Stem, &sc.stem)
	sc.tab.reset(len(sc.pred) + len(sc.ref) + articleIDs)
	if s.unicode {
		sc.tab.seedArticles()
	}
	sc.buf = withSlack(sc.buf)
	sc.predID = sc.tab.intern(sc.predID[:0], sc.buf, sc.pred)
	sc.refID = sc.tab.intern(sc.refID[:0], sc.buf, sc.ref)
	return s.rougeFromIDs(sc, sc.tab.n)
}

// stemIDs replaces the token ids of the fast path by ids of their stems
// and returns the number of distinct stems. Each distinct token is stemmed
// once (tokens longer than 3 bytes, as both tokenizers do), so stemming stays
// out of the tokenizer's inner loop.
func (sc *scratch) stemIDs() int {
	t := &sc.tab
	sc.stemTab.reset(t.n)
	sc.stemBuf = sc.stemBuf[:0]
	sc.stemID = resize(sc.stemID, t.n)
	full := sc.buf[:cap(sc.buf)] // internASCII leaves 16 bytes of slack
	for id, k := range t.keys {
		n := int(k.end - k.start)
		if n <= maxPacked {
			ml, mh := packMasks(n)
			lo := binary.LittleEndian.Uint64(full[k.start:]) & ml
			hi := binary.LittleEndian.Uint64(full[k.start+8:]) & mh
			if n > 3 {
				lo, hi, n = sc.stem.stemPacked(lo, hi, n)
			}
			// A key of at most 16 bytes is compared packed: its span only
			// needs the right length.
			sc.stemID[id] = sc.stemTab.lookup(nil, span{0, int32(n)}, lo, hi, hashPacked(lo, hi, n))
			continue
		}
		// Long words are rare: stem them in stemBuf and intern from there.
		start := len(sc.stemBuf)
		sc.stemBuf = sc.stem.stemTail(append(sc.stemBuf, full[k.start:k.end]...), start)
		sc.stemBuf = withSlack(sc.stemBuf)
		sp := [1]span{{int32(start), int32(len(sc.stemBuf))}}
		sc.stemTab.intern(sc.stemID[id:id], sc.stemBuf, sp[:]) // writes sc.stemID[id]
	}
	for i, id := range sc.predID {
		sc.predID[i] = sc.stemID[id]
	}
	for i, id := range sc.refID {
		sc.refID[i] = sc.stemID[id]
	}
	return sc.stemTab.n
}

// fastRouge tokenizes and interns sc.text, the prediction's bytes up to
// split and then the reference's, on the ASCII fast path, setting predID,
// refID and k (the number of distinct ids). It reports false, having done
// nothing useful, if the text is not ASCII.
func (s *Scorer) fastRouge(sc *scratch, split int) bool {
	// Zeroed slack, so that only the text's own bytes decide whether it was
	// ASCII.
	sc.text = withTextSlack(sc.text)
	clear(sc.text[len(sc.text) : len(sc.text)+textSlack])
	// Without stemming the tokens stay as they are, for the fused SQuAD
	// path, whose articles need their reserved ids (with stemming the ids
	// are remapped to stems, and seeded keys have no bytes to stem).
	fused := !s.cfg.Stem
	tokens := maxASCIITokens(len(sc.text))
	if fused {
		// Room for the SQuAD tokens squadFromRouge may add (at most one
		// per Rouge token).
		tokens *= 2
	}
	sc.tab.reset(tokens + articleIDs)
	sc.tab.keepPos, sc.tab.pos = fused, sc.tab.pos[:0]
	if fused {
		sc.tab.seedArticles()
	}
	var ok1, ok2 bool
	sc.predID, sc.buf, ok1 = sc.tab.internASCII(sc.predID[:0], sc.buf[:0], sc.text, 0, split)
	sc.predTokens, sc.predBuf = len(sc.tab.pos), len(sc.buf)
	sc.refID, sc.buf, ok2 = sc.tab.internASCII(sc.refID[:0], sc.buf, sc.text, split, len(sc.text))
	sc.tab.keepPos = false
	if !ok1 || !ok2 {
		return false
	}
	sc.k = sc.tab.n
	if s.cfg.Stem {
		sc.k = sc.stemIDs()
	}
	return true
}

// squadFromRouge sets sc.sqPID and sc.sqRID to the ids of the SQuAD
// normalize_answer tokens of prediction and reference, from the tokens that
// fastRouge just interned from the texts themselves (ASCII, unicode
// tokenizer, no stemming). It reports false, having set nothing useful, if
// the text holds an ASCII control character (kept by normalize_answer as
// part of a token: the general path handles it).
//
// On ASCII text without control characters, normalize_answer's tokens are
// the whitespace-separated fields with punctuation deleted, that is the
// concatenation of the Rouge tokens (runs of [a-z0-9], lowercased) of each
// field, without the fields that are "a", "an" or "the" and those that had
// nothing but punctuation. A field of one Rouge token is that token (same
// id); the Rouge tokens of a field lie back to back in sc.buf, so a longer
// field is interned from there. Equal ids are equal bytes, so EM and F1 come
// from the ids.
func (s *Scorer) squadFromRouge(sc *scratch, prediction, reference string) bool {
	var ok bool
	if sc.sqPID, ok = squadIDs(sc, sc.sqPID[:0], prediction, 0, sc.predID, sc.tab.pos[:sc.predTokens]); !ok {
		return false
	}
	sc.sqRID, ok = squadIDs(sc, sc.sqRID[:0], reference, len(prediction), sc.refID, sc.tab.pos[sc.predTokens:])
	return ok
}

// squadIDs appends the SQuAD token ids of text, whose Rouge tokens have ids
// ids and source spans pos (offsets into text shifted by off).
func squadIDs(sc *scratch, dst []int32, text string, off int, ids []int32, pos []span) ([]int32, bool) {
	// gap scans the bytes between tokens: it reports whether they hold
	// whitespace, and false for ok on a control character.
	gap := func(from, to int) (space, ok bool) {
		for i := from; i < to; i++ {
			switch squadClass[text[i]] {
			case squadSpace:
				space = true
			case squadOther:
				return false, false
			}
		}
		return space, true
	}
	if len(ids) == 0 {
		_, ok := gap(0, len(text))
		return dst, ok
	}
	full := sc.buf[:cap(sc.buf)]
	// The side's Rouge token bytes lie back to back in sc.buf from bufAt.
	bufAt := 0
	if off > 0 {
		bufAt = sc.predBuf
	}
	prevEnd := 0
	first, firstBuf, buf := 0, bufAt, bufAt
	emit := func(k int, endBuf int) {
		var id int32
		if k == first+1 {
			id = ids[first] // a field of one token
		} else {
			sp := [1]span{{int32(firstBuf), int32(endBuf)}}
			var one [1]int32
			id = sc.tab.intern(one[:0], full, sp[:])[0]
		}
		if id >= articleIDs {
			dst = append(dst, id)
		}
	}
	for k, p := range pos {
		start, end := int(p.start)-off, int(p.end)-off
		space, ok := gap(prevEnd, start)
		if !ok {
			return dst, false
		}
		if k > 0 && space {
			emit(k, buf)
			first, firstBuf = k, buf
		}
		buf += end - start
		prevEnd = end
	}
	if _, ok := gap(prevEnd, len(text)); !ok {
		return dst, false
	}
	emit(len(pos), buf)
	return dst, true
}

// appendSeparatorsBlanked appends text to dst with every non-ASCII
// character replaced by a space, and reports whether all of them were
// separators for both tokenizers, so that the result has the same tokens as
// text: valid UTF-8 that is not a letter (L*), number (N*) or mark (M*).
// Such text is also unchanged by NFC as far as tokens go: no separator
// decomposes into a letter or number, a mark that a decomposition yields
// has no token before it and is dropped, and nothing composes with a
// following ASCII character (TestSeparatorsBlanked checks every character).
func appendSeparatorsBlanked(dst []byte, text string) ([]byte, bool) {
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if r == utf8.RuneError && size == 1 || unicode.In(r, unicode.L, unicode.N, unicode.M) {
			return dst, false
		}
		dst = append(dst, ' ')
		i += size
	}
	return dst, true
}

// rougeFromIDs is Rouge-L P, R and F1 of the interned tokens in sc, whose
// ids are below k.
func (s *Scorer) rougeFromIDs(sc *scratch, k int) (p, r, f float64) {
	if len(sc.predID) == 0 || len(sc.refID) == 0 {
		return 0, 0, 0
	}
	var lcs int
	lcs, sc.peq, sc.v = lcsBits(sc.predID, sc.refID, k, sc.peq, sc.v)
	p = float64(lcs) / float64(len(sc.predID))
	r = float64(lcs) / float64(len(sc.refID))
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
	sc.text = append(append(sc.text[:0], pred...), ref...)
	sc.text = withTextSlack(sc.text)
	// Fields are separated by one space: at most one per two bytes.
	sc.tab.reset(len(sc.text)/2 + 2)
	sc.predID, sc.buf = sc.tab.internFields(sc.predID[:0], sc.buf[:0], sc.text, 0, len(pred))
	sc.refID, sc.buf = sc.tab.internFields(sc.refID[:0], sc.buf, sc.text, len(pred), len(sc.text))
	if len(sc.predID) == 0 || len(sc.refID) == 0 {
		return 0
	}
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
	p := 1.0 * float64(same) / float64(len(sc.predID))
	r := 1.0 * float64(same) / float64(len(sc.refID))
	return (2 * p * r) / (p + r)
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
