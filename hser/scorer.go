package hser

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/himes-rl/himes/internal/trecmeasure"
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
	Reward  float64 `json:"reward"` // RougeF1 + Alpha*EM + Beta*Hit (+ Gamma*RankReward)

	// The rank term (Scorer.WithRank), set only for a judged turn: Judged,
	// the 1-based rank of the first relevant passage (0: none retrieved),
	// its RankReward and the weight Gamma (reward.rank) it enters R with.
	Judged        bool    `json:"judged,omitempty"`
	FirstRelevant int     `json:"first_relevant,omitempty"`
	RankReward    float64 `json:"rank_reward,omitempty"`
	Gamma         float64 `json:"gamma,omitempty"`
	// The retrieval terms of a judged turn (Scorer.WithRetrieval): trec_eval's
	// recall_k, ndcg_cut_k and recip_rank of the rewrite's own ranking, at
	// the configured k, whatever their weights (which are in the Config).
	RecallK float64 `json:"recall_k,omitempty"`
	NDCGK   float64 `json:"ndcg_k,omitempty"`
	RR      float64 `json:"rr,omitempty"`
}

// Reward is the HSER total R = w·F1 + α·EM + β·Hit (w = reward.rouge_l, 1 by
// default: 1·F1 is F1's bits), evaluated left to right ((w·F1 + α·EM) +
// β·Hit) so every caller gets the same bits.
func (w Weights) Reward(rougeF1, em, hit float64) float64 {
	return w.RougeLWeight()*rougeF1 + w.Alpha*em + w.Beta*hit
}

// RewardRanked is Reward plus Rank·rankReward; with Rank 0 it is Reward's
// bits exactly, so the default reward is unchanged.
func (w Weights) RewardRanked(rougeF1, em, hit, rankReward float64) float64 {
	r := w.Reward(rougeF1, em, hit)
	if w.Rank != 0 {
		r += w.Rank * rankReward
	}
	return r
}

// WithRank adds the rank term to sc, a score of a judged turn's answer:
// firstRelevant is FirstRelevantRank of the rewrite's passage ranking (0:
// no relevant passage retrieved). The total becomes RewardRanked.
func (s *Scorer) WithRank(sc Score, firstRelevant int) Score {
	sc.Judged, sc.FirstRelevant = true, max(firstRelevant, 0)
	sc.RankReward, sc.Gamma = RankReward(firstRelevant), s.cfg.Rank
	sc.Reward = s.cfg.Weights.RewardRanked(sc.RougeF1, sc.EM, sc.Hit, sc.RankReward)
	return sc
}

// WithRetrieval adds every retrieval term to sc, a score of a judged turn's
// answer: the rank term (WithRank) and Recall@k, NDCG@k and RR of ranking
// (the rewrite's passage ids, best first) against qrels, each weighted by
// its reward key. With every retrieval weight 0 the total is WithRank's bits.
func (s *Scorer) WithRetrieval(sc Score, ranking []string, qrels map[string]int) Score {
	sc = s.WithRank(sc, FirstRelevantRank(ranking, qrels))
	sc.RecallK = trecmeasure.Recall(ranking, qrels, s.cfg.RecallCutoff())
	sc.NDCGK = trecmeasure.NDCGCut(ranking, qrels, s.cfg.NDCGCutoff())
	sc.RR = trecmeasure.RecipRank(ranking, qrels)
	sc.Reward = s.cfg.RetrievalReward(sc.Reward, sc.RecallK, sc.NDCGK, sc.RR)
	return sc
}

// RetrievalReward is r (the HSER total with its rank term) plus the
// weighted Recall@k, NDCG@k and RR terms, each added only when its weight is
// non-zero, so that the default reward keeps its bits.
func (c Config) RetrievalReward(r, recall, ndcg, rr float64) float64 {
	for _, t := range [...]struct{ w, v float64 }{{c.Recall.Weight, recall}, {c.NDCG.Weight, ndcg}, {c.RR.Weight, rr}} {
		if t.w != 0 {
			r += t.w * t.v
		}
	}
	return r
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
	// noRefCache turns the prepared reference off (tests compare with it):
	// every pair is then scanned and interned whole, prediction first.
	noRefCache bool
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
	scan           asciiScan
	// The fused SQuAD path (fastRouge): whether the last fastRouge set
	// the SQuAD token ids of both sides.
	sqFused      bool
	sqPID, sqRID []int32
	// tokenF1's own memory.
	f1 struct {
		text, buf []byte
		tab       internTable
		pred, ref []int32
	}
	// The prepared reference (rougeCached): while refOK, sc.tab holds
	// refStr's tokens interned first (the articles seeded before them
	// without stemming), refKeys keys whose bytes are sc.buf[:refW], then
	// the last prediction's; sc.refID and sc.sqRID (refID0 with stemming,
	// which remaps refID) are refStr's ids. refRoom is the table room its
	// ids take and refCtl whether it holds an ASCII control character.
	// refStr is the caller's string itself (the pooled scratch keeps this
	// one text alive until the next reference), so that a hit with the
	// same string is a pointer compare.
	refOK   bool
	refStr  string
	refKeys int
	refW    int
	refRoom int
	refCtl  bool
	refID0  []int32
	// The prepared reference's stems (stemIDs): stemTab's keys and
	// stemBuf's bytes after them, and the hashes of the stems added since.
	stemRefN, stemRefW int
	stemNewH           []uint64
	// sqRef, and normRef with stemming, hold the prepared reference's
	// normalizations (Score computes them once per reference).
	sqRefOK, normRefOK bool
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
		// reuse the ids rouge just interned, for the EM and, joined, for
		// Hit.
		out.EM = s.unicodeEM(sc)
		if len(context) > 0 {
			sc.normA = sc.appendJoined(sc.normA[:0], sc.predID)
			sc.normRef = sc.appendJoined(sc.normRef[:0], sc.refID)
		}
	}
	// The official SQuAD numbers: normalized answers are token strings
	// joined by single spaces. On ASCII text the interned Rouge tokens give
	// them without normalizing again (squadFromRouge); the normalized
	// bytes are then only built where Hit needs them.
	fused := sc.sqFused
	if fused {
		out.SquadEM, out.SquadF1 = squadFromIDs(sc, sc.sqPID, sc.sqRID)
	} else {
		sc.sqA = appendSQuADNormalized(sc.sqA[:0], prediction, &sc.tmp)
		if !sc.sqRefOK { // else sqRef is the prepared reference's already
			sc.sqRef = appendSQuADNormalized(sc.sqRef[:0], reference, &sc.tmp)
			sc.sqRefOK = sc.refOK
		}
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
			if fused { // the SQuAD tokens' ids, joined
				sc.normA = sc.appendJoined(sc.normA[:0], sc.sqPID)
				sc.normRef = sc.appendJoined(sc.normRef[:0], sc.sqRID)
			} else {
				sc.normA = append(sc.normA[:0], sc.sqA...)
				sc.normRef = append(sc.normRef[:0], sc.sqRef...)
			}
		}
	case s.cfg.Stem:
		sc.normA = s.normalize(sc, sc.normA[:0], prediction)
		if !sc.normRefOK { // only this branch writes normRef with stemming
			sc.normRef = s.normalize(sc, sc.normRef[:0], reference)
			sc.normRefOK = sc.refOK
		}
		if bytes.Equal(sc.normA, sc.normRef) {
			out.EM = 1
		}
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

// appendJoined appends the bytes of the tokens ids of the last rouge call
// (sc.tab's keys, in sc.buf), joined by single spaces, to dst, leaving out
// the articles (ids below articleIDs, seeded without bytes). With the
// unicode tokenizer unstemmed, predID and refID give the normalized answers
// of s.normalize; with the fused SQuAD path, sqPID and sqRID give
// normalize_answer's.
func (sc *scratch) appendJoined(dst []byte, ids []int32) []byte {
	for _, id := range ids {
		if id < articleIDs {
			continue
		}
		if len(dst) > 0 {
			dst = append(dst, ' ')
		}
		k := sc.tab.keys[id]
		dst = append(dst, sc.buf[k.start:k.end]...)
	}
	return dst
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
	counts := sc.counts
	clear(counts)
	for _, id := range ref {
		counts[id]++
	}
	// Take one of id from the reference's multiset if there is one left,
	// without a branch on it (c ≥ 0; d = 1 if c > 0).
	same := 0
	for _, id := range pred {
		c := counts[id]
		d := int32(uint32(-c) >> 31)
		counts[id] = c - d
		same += int(d)
	}
	if same == 0 {
		return em, 0
	}
	p := 1.0 * float64(same) / float64(len(pred))
	r := 1.0 * float64(same) / float64(len(ref))
	return em, (2 * p * r) / (p + r)
}

// unicodeEM computes the unicode EM from the interned Rouge tokens of the
// last rouge call, leaving out the articles (ids below articleIDs, see
// seedArticles). Either side may be empty: then EM is 1 only if the other
// has nothing but articles, as in SQuAD.
func (s *Scorer) unicodeEM(sc *scratch) float64 {
	if equalNonArticles(sc.predID, sc.refID) {
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
	// A GRPO step scores G answers against one reference: when this
	// scratch prepared it last, only the prediction is scanned and
	// interned (rougeCached). Go's string == compares lengths, then
	// pointers, then bytes, so the check costs little on a miss and on a
	// hit with the caller's own string.
	if sc.refOK && reference == sc.refStr && s.rougeCached(sc, prediction) {
		return s.rougeFromIDs(sc, sc.k)
	}
	// Every other path rebuilds sc.tab, and a prepared reference is a new
	// one: its normalizations are not known yet.
	sc.refOK, sc.refStr = false, ""
	sc.sqRefOK, sc.normRefOK = false, false
	// On ASCII text both tokenizers make the same tokens: runs of [a-z0-9]
	// after lowercasing, stemmed when longer than 3 bytes if stemming is
	// on. They are found, packed and interned from a copy of the text
	// (fastRouge), which also gives the SQuAD tokens.
	var split int
	sc.text, split = fillText(sc.text, prediction, reference)
	sc.scan.xf = sc.scan.xf[:0]
	if s.fastRouge(sc, split, !s.noRefCache) {
		if !s.noRefCache {
			sc.refOK, sc.refStr = true, reference
		}
		return s.rougeFromIDs(sc, sc.k)
	}
	// Text whose non-ASCII characters are separators (’ “ ” — … and the
	// like) or, unstemmed, plain letters: the fast path again, on the text
	// with them blanked; the fields holding them are tokenized and
	// normalized on their own (blankText).
	ok := blankText(sc, prediction, reference, s.unicode, s.unicode && !s.cfg.Stem)
	ok = ok && s.fastRouge(sc, int(sc.scan.split), false)
	sc.scan.pred, sc.scan.ref = "", "" // the pooled scratch keeps no texts
	if ok {
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
//
// The keys below refKeys are the prepared reference's (fastRouge interns
// it first). Without hit every key is stemmed and the state after the
// reference's is recorded (stemRefN, stemRefW; the stems added after it
// are listed by hash in stemNewH). With hit, the reference's stems and
// stem ids are those recorded: the last prediction's stems are taken out
// of stemTab (forgetHashed) and only the prediction's keys are stemmed.
// Stem ids are only compared for equality, like token ids.
func (sc *scratch) stemIDs(refKeys int, hit bool) int {
	t := &sc.tab
	from := 0
	if hit {
		sc.stemTab.forgetHashed(sc.stemRefN, sc.stemNewH)
		sc.stemBuf = sc.stemBuf[:sc.stemRefW]
		sc.stemID = slices.Grow(sc.stemID[:refKeys], t.n-refKeys)[:t.n]
		from = refKeys
	} else {
		sc.stemTab.reset(t.n)
		sc.stemBuf = sc.stemBuf[:0]
		sc.stemID = resize(sc.stemID, t.n)
	}
	sc.stemNewH = sc.stemNewH[:0]
	full := sc.buf[:cap(sc.buf)] // internTokens leaves 16 bytes of slack
	for id := from; id < len(t.keys); id++ {
		if id == refKeys {
			sc.stemRefN, sc.stemRefW = sc.stemTab.n, len(sc.stemBuf)
		}
		k := t.keys[id]
		n0 := sc.stemTab.n
		var h uint64
		if n := int(k.end - k.start); n <= maxPacked {
			ml, mh := packMasks(n)
			lo := binary.LittleEndian.Uint64(full[k.start:]) & ml
			hi := binary.LittleEndian.Uint64(full[k.start+8:]) & mh
			if n > 3 {
				lo, hi, n = sc.stem.stemPacked(lo, hi, n)
			}
			// A key of at most 16 bytes is compared packed: its span only
			// needs the right length.
			h = hashPacked(lo, hi, n)
			sc.stemID[id] = sc.stemTab.lookup(nil, span{0, int32(n)}, lo, hi, h)
		} else {
			// Long words are rare: stem them in stemBuf and intern from
			// there (as intern does).
			start := len(sc.stemBuf)
			sc.stemBuf = sc.stem.stemTail(append(sc.stemBuf, full[k.start:k.end]...), start)
			sc.stemBuf = withSlack(sc.stemBuf)
			sp := span{int32(start), int32(len(sc.stemBuf))}
			var lo, hi uint64
			lo, hi, h = keyHash(sc.stemBuf, sp) // keyed as intern keys it: a short stem packed
			sc.stemID[id] = sc.stemTab.lookup(sc.stemBuf, sp, lo, hi, h)
		}
		if id >= refKeys && sc.stemTab.n > n0 {
			sc.stemNewH = append(sc.stemNewH, h)
		}
	}
	if refKeys >= len(t.keys) && !hit {
		sc.stemRefN, sc.stemRefW = sc.stemTab.n, len(sc.stemBuf)
	}
	for i, id := range sc.predID {
		sc.predID[i] = sc.stemID[id]
	}
	for i, id := range sc.refID {
		sc.refID[i] = sc.stemID[id]
	}
	return sc.stemTab.n
}

// fastRouge tokenizes and interns sc.text (padded by padText), the
// prediction's bytes before split and the reference's from there, on the
// ASCII fast path, setting predID, refID and k (the number of distinct ids).
// Without stemming it also sets sqPID and sqRID to the ids of the SQuAD
// normalize_answer tokens and sqFused, unless the text holds an ASCII
// control character (kept by normalize_answer as part of a token: the
// general path handles it). It reports false, having done nothing useful,
// if the text is not ASCII.
//
// With prepare (text from fillText, no xfields) it interns the reference
// first and records its state for rougeCached; ids are only compared for
// equality (the articles keep ids 0-2), so the order changes no score.
//
// On ASCII text without control characters, normalize_answer's tokens are
// the whitespace-separated fields with punctuation deleted, that is the
// concatenation of the Rouge tokens (runs of [a-z0-9], lowercased) of each
// field, without the fields that are "a", "an" or "the" and those that had
// nothing but punctuation. A field of one Rouge token is that token (same
// id); the Rouge tokens of a field lie back to back in sc.buf, so a longer
// field is interned from there. Equal ids are equal bytes, so EM and F1 come
// from the ids. On text from blankText, the fields it lists in sc.scan.xf
// are interned from their normalize_answer instead (internXFields).
func (s *Scorer) fastRouge(sc *scratch, split int, prepare bool) bool {
	sc.sqFused = false
	tokens, ascii, control := sc.scan.scan(sc.text)
	if !ascii {
		return false
	}
	// Without stemming the tokens stay as they are, for the unicode EM and
	// SQuAD, whose articles need their reserved ids (with stemming the ids
	// are remapped to stems, and seeded keys have no bytes to stem).
	seed := !s.cfg.Stem
	squad := seed
	sc.buf = growBuf(sc.buf, sc.text)
	room := tokens + articleIDs
	if squad {
		room += tokens / 2 // a field of several tokens may add an id
		// The xfields' bytes bound their normalized bytes and SQuAD ids.
		xbytes := 0
		for _, f := range sc.scan.xf {
			xbytes += int(f.end - f.start)
		}
		if xbytes > 0 {
			room += xbytes
			sc.buf = slices.Grow(sc.buf, len(sc.text)+xGrowMax*xbytes+2*maxPacked+packSlack)
			sc.scan.markXFields(tokens)
		}
	} else {
		sc.scan.xf = sc.scan.xf[:0] // no SQuAD ids: the xfields' tokens are ordinary ones
	}
	np := tokensBefore(sc.scan.tok[:tokens], int32(split))
	if prepare {
		// Room for this prediction again on top of the reference, as
		// rougeCached counts it.
		sc.refRoom = tableRoom(tokens-np, squad) + articleIDs
		room = max(room, sc.refRoom+tableRoom(np, squad))
	}
	sc.tab.reset(4 * room)
	if seed {
		sc.tab.seedArticles()
	}
	if !squad {
		// No SQuAD fields: each token on its own, so that interning adds
		// no concatenations.
		for i := range sc.scan.tok[:tokens] {
			sc.scan.tok[i].field = 1
		}
	}
	if prepare {
		sc.scan.xi, sc.scan.xlim = 0, math.MaxInt32
		sc.refID, sc.sqRID, sc.buf = sc.tab.internTokens(sc.refID[:0], sc.sqRID[:0], &sc.scan, sc.text, sc.buf, np, tokens)
		sc.refKeys, sc.refW = sc.tab.n, len(sc.buf)
		sc.refCtl = control && hasControl(sc.text[split:])
		sc.predID, sc.sqPID, sc.buf = sc.tab.internTokens(sc.predID[:0], sc.sqPID[:0], &sc.scan, sc.text, sc.buf, 0, np)
	} else {
		sc.scan.xi, sc.scan.xlim = 0, int32(split)
		sc.predID, sc.sqPID, sc.buf = sc.tab.internTokens(sc.predID[:0], sc.sqPID[:0], &sc.scan, sc.text, sc.buf, 0, np)
		sc.scan.xlim = math.MaxInt32
		sc.refID, sc.sqRID, sc.buf = sc.tab.internTokens(sc.refID[:0], sc.sqRID[:0], &sc.scan, sc.text, sc.buf, np, tokens)
	}
	if s.cfg.Stem {
		refKeys := len(sc.tab.keys) // no prepared reference: nothing recorded
		if prepare {
			sc.refID0 = append(sc.refID0[:0], sc.refID...) // stemIDs remaps refID
			refKeys = sc.refKeys
		}
		sc.k = sc.stemIDs(refKeys, false)
		return true
	}
	sc.sqFused = !(control && hasControl(sc.text))
	sc.k = sc.tab.n
	return true
}

// tableRoom is the number of ids tokens of one side may take in sc.tab:
// one each, and with SQuAD fields one per field of several tokens.
func tableRoom(tokens int, squad bool) int {
	if squad {
		return tokens + tokens/2 + 1
	}
	return tokens
}

// rougeCached is fastRouge for prediction against the reference prepared
// in sc (refOK), which it neither scans nor interns again: the last
// prediction's keys are taken out of sc.tab (forget), leaving the
// reference's, and prediction is interned after them. It reports false,
// having changed sc.tab only as forget does, when prediction is not ASCII
// or the table has no room for it at the usual load; the caller then scores
// the pair from scratch.
func (s *Scorer) rougeCached(sc *scratch, prediction string) bool {
	sc.sqFused = false
	sc.text = padText(append(sc.text[:0], prediction...))
	tokens, ascii, control := sc.scan.scan(sc.text)
	if !ascii {
		return false
	}
	squad := !s.cfg.Stem
	// fastRouge's reset(4*room) makes at least 8 slots per id.
	if 8*(sc.refRoom+tableRoom(tokens, squad)) > int(sc.tab.mask)+1 {
		return false
	}
	sc.tab.forget(sc.refKeys, sc.buf) // before buf moves: it reads the keys
	sc.buf = slices.Grow(sc.buf[:sc.refW], len(sc.text)+2*maxPacked)
	if !squad {
		for i := range sc.scan.tok[:tokens] {
			sc.scan.tok[i].field = 1
		}
	}
	sc.scan.xf = sc.scan.xf[:0]
	sc.scan.xi, sc.scan.xlim = 0, math.MaxInt32
	sc.predID, sc.sqPID, sc.buf = sc.tab.internTokens(sc.predID[:0], sc.sqPID[:0], &sc.scan, sc.text, sc.buf, 0, tokens)
	if s.cfg.Stem {
		sc.refID = append(sc.refID[:0], sc.refID0...)
		// The recorded stems serve while stemTab has room for every key at
		// reset's load (it was reset for the keys of the prepared pair).
		sc.k = sc.stemIDs(sc.refKeys, 2*sc.tab.n <= int(sc.stemTab.mask)+1)
		return true
	}
	sc.sqFused = !(sc.refCtl || control && hasControl(sc.text))
	sc.k = sc.tab.n
	return true
}

// blankText sets sc.text to prediction, scanSep, reference (padded) with
// each non-ASCII character replaced by as many bytes: ' ' for Python
// whitespace, 'x' for a letter or number kept in a token, '*' for the
// others, so offsets stay those of the original text; and sc.scan's split,
// pred, ref and xf: the fields (runs between whitespace) that hold one of
// the last two. SQuAD's tokens are then those of the fast path outside the
// xfields, and normalize_answer of each xfield's text (normalize_answer is
// local to fields); a token holding an 'x' is folded from the original.
//
// It reports false unless the tokenizer sees the text so: with rouge-score
// every non-ASCII character but U+212A and U+0130 (which lowercase to
// ASCII letters) separates tokens, invalid bytes too; with unicode the
// separators are appendSeparatorsBlanked's, and with letters the letters
// and numbers that neither NFC nor a neighbour changes (NFC-normal, no
// composition with what precedes, not Han, kana or hangul; marks are
// refused) are kept. Letters need the tokens unstemmed (stemIDs stems
// ASCII bytes).
func blankText(sc *scratch, prediction, reference string, unicodeTok, letters bool) bool {
	a := &sc.scan
	a.pred, a.ref, a.split = prediction, reference, int32(len(prediction)+1)
	a.xf = a.xf[:0]
	dst := sc.text[:0]
	var xs []int32 // offsets of the '*' that stand for a character
	xs = a.xpos[:0]
	for k, text := range [2]string{prediction, reference} {
		if k == 1 {
			dst = append(dst, scanSep)
		}
		for i := 0; i < len(text); {
			if j := i + asciiPrefix(text[i:]); j > i { // the ASCII run, copied at once
				dst = append(dst, text[i:j]...)
				if i = j; i == len(text) {
					break
				}
			}
			r, size := utf8.DecodeRuneInString(text[i:])
			b := byte('*')
			if unicodeTok {
				if r == utf8.RuneError && size == 1 || unicode.IsMark(r) {
					return false
				}
				if unicode.IsLetter(r) || unicode.IsNumber(r) {
					if !letters || !keptLetter(text[i:i+size], r) {
						return false
					}
					b = 'x'
				}
			} else if r == '\u212A' || r == '\u0130' {
				return false
			}
			if isPySpace(r) {
				b = ' '
			} else {
				xs = append(xs, int32(len(dst)))
			}
			for range size {
				dst = append(dst, b)
			}
			i += size
		}
	}
	a.xpos = xs
	sc.text = padText(dst)
	text := sc.text
	end := int32(-1)
	for _, p := range xs {
		if p < end {
			continue // in the field just added
		}
		s, e := p, p
		for s > 0 && squadClass[text[s-1]] != squadSpace {
			s--
		}
		for int(e) < len(text) && squadClass[text[e]] != squadSpace {
			e++
		}
		a.xf = append(a.xf, span{s, e})
		end = e
	}
	return true
}

// keptLetter reports whether the letter or number r (encoded as c) is a
// token character that the unicode tokenizer keeps as it is wherever it
// stands: NFC leaves it alone and it composes with nothing before it (the
// ASCII and non-ASCII characters around it do not compose with it either:
// marks, the only ones that could, are refused), and it is not one of the
// scripts whose characters are tokens of their own.
func keptLetter(c string, r rune) bool {
	if r < 0x250 { // Latin-1 and Latin Extended-A/B letters are
		return true // NFC-stable starters (TestKeptLetters checks them all)
	}
	return !isSplitRune(r) && norm.NFC.IsNormalString(c) && norm.NFC.PropertiesString(c).BoundaryBefore()
}

// asciiPrefix returns the length of the longest ASCII prefix of s, eight
// bytes at a time.
func asciiPrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if x := binary.LittleEndian.Uint64([]byte(s[i : i+8])); x&0x8080808080808080 != 0 {
			return i + bits.TrailingZeros64(x&0x8080808080808080)/8
		}
	}
	for ; i < len(s) && s[i] < utf8.RuneSelf; i++ {
	}
	return i
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
//
// It has its own table, buffers and ids, so that the Rouge tokens' (sc.tab,
// sc.buf, sc.refID), which hold the prepared reference, survive it.
func tokenF1(sc *scratch, pred, ref []byte) float64 {
	f := &sc.f1
	f.text = append(append(f.text[:0], pred...), ref...)
	f.text = withTextSlack(f.text)
	// Fields are separated by one space: at most one per two bytes.
	f.tab.reset(len(f.text)/2 + 2)
	f.pred, f.buf = f.tab.internFields(f.pred[:0], f.buf[:0], f.text, 0, len(pred))
	f.ref, f.buf = f.tab.internFields(f.ref[:0], f.buf, f.text, len(pred), len(f.text))
	if len(f.pred) == 0 || len(f.ref) == 0 {
		return 0
	}
	sc.counts = resize(sc.counts, f.tab.n)
	clear(sc.counts)
	for _, id := range f.ref {
		sc.counts[id]++
	}
	same := 0
	for _, id := range f.pred {
		if sc.counts[id] > 0 {
			sc.counts[id]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := 1.0 * float64(same) / float64(len(f.pred))
	r := 1.0 * float64(same) / float64(len(f.ref))
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
