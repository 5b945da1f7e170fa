package rollout

import (
	"context"
	"fmt"
	"github.com/himes-rl/himes/internal/words"
	"strings"
	"unicode"

	"github.com/himes-rl/himes/retrieval"
)

// Extractive is the embedded baseline reader: it answers with the span of the
// top retrieved chunks that shares the most content words with the question.
// It is deterministic, needs no model, and its answer quality depends only on
// what retrieval put in front of it, which is exactly the signal the rewriter
// is trained on. It is a baseline, not a substitute for a generative reader:
// it cannot paraphrase, combine passages or abstain.
type Extractive struct {
	cfg  ExtractiveConfig
	stop map[string]bool // read-only after construction
}

// NewExtractive returns the extractive reader; zero fields take the defaults.
func NewExtractive(cfg ExtractiveConfig) *Extractive {
	def := DefaultExtractiveConfig()
	if cfg.MaxChunks < 1 {
		cfg.MaxChunks = def.MaxChunks
	}
	if cfg.MaxWords < 1 {
		cfg.MaxWords = def.MaxWords
	}
	return &Extractive{cfg: cfg, stop: words.FunctionWords()}
}

// Name identifies the reader and its settings (part of the answer-cache key).
func (e *Extractive) Name() string {
	return fmt.Sprintf("extractive/v1(max_chunks=%d,max_words=%d)", e.cfg.MaxChunks, e.cfg.MaxWords)
}

// Deterministic is always true: the same chunks give the same span.
func (e *Extractive) Deterministic() bool { return true }

// Respond picks the best span. Candidate spans are the sentences of the top
// MaxChunks chunks, sentences longer than MaxWords cut into half-overlapping
// windows. A span scores the number of distinct question content words
// (stopwords removed, case-folded) it contains; ties go to the better-ranked
// chunk, then to the earlier span. With no overlap at all the first span of
// the top chunk is returned; with no chunks the answer is empty.
func (e *Extractive) Respond(ctx context.Context, question string, chunks []retrieval.Ranked) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if len(chunks) > e.cfg.MaxChunks {
		chunks = chunks[:e.cfg.MaxChunks]
	}
	qset := map[string]bool{}
	for _, w := range contentWords(question, e.stop) {
		qset[w] = true
	}
	best, bestScore := "", -1
	for _, c := range chunks {
		for _, span := range spans(c.Text, e.cfg.MaxWords) {
			seen := map[string]bool{}
			score := 0
			for _, w := range contentWords(span, e.stop) {
				if qset[w] && !seen[w] {
					seen[w] = true
					score++
				}
			}
			// Strictly greater keeps the earliest span of the best-ranked chunk on ties.
			if score > bestScore {
				best, bestScore = span, score
			}
		}
	}
	return best, nil
}

// spans splits text into sentences and cuts sentences longer than maxWords
// into windows of maxWords words with stride maxWords/2 (the last window is
// aligned to the sentence end so no word is lost).
func spans(text string, maxWords int) []string {
	var out []string
	for _, s := range sentences(text) {
		words := strings.Fields(s)
		if len(words) == 0 {
			continue
		}
		if len(words) <= maxWords {
			out = append(out, strings.Join(words, " "))
			continue
		}
		stride := max(1, maxWords/2)
		for start := 0; ; start += stride {
			if start+maxWords >= len(words) {
				out = append(out, strings.Join(words[len(words)-maxWords:], " "))
				break
			}
			out = append(out, strings.Join(words[start:start+maxWords], " "))
		}
	}
	return out
}

// sentences splits at line breaks and at '.', '!' or '?' followed by
// whitespace, keeping the punctuation with its sentence.
func sentences(text string) []string {
	var out []string
	rs := []rune(text)
	start := 0
	for i, r := range rs {
		end := -1
		switch {
		case r == '\n':
			end = i
		case (r == '.' || r == '!' || r == '?') && (i+1 == len(rs) || unicode.IsSpace(rs[i+1])):
			end = i + 1
		}
		if end >= 0 {
			if s := strings.TrimSpace(string(rs[start:end])); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if start < len(rs) {
		if s := strings.TrimSpace(string(rs[start:])); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// contentWords returns the case-folded letter/digit runs of s that are not stopwords.
func contentWords(s string, stop map[string]bool) []string {
	var out []string
	for _, w := range words.LowerFields(s) {
		if !stop[w] {
			out = append(out, w)
		}
	}
	return out
}
