package grpo

import (
	"strings"
	"unicode"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/rollout"
)

// guardCounts counts the reward-hacking patterns seen in one group.
type guardCounts struct{ leak, empty, tooLong, copiesHistory int }

// copyCoverage is the share of the history's distinct words a rewrite must
// contain to count as copying the history; short histories (fewer than
// copyMinWords distinct words) are never flagged, since quoting a one-line
// history is legitimate.
const (
	copyCoverage = 0.9
	copyMinWords = 8
)

// applyGuards detects reward hacking in a group's rollouts and, for guards in
// "penalty" mode, replaces the reward with the configured penalty (every
// term is set so that both reward aggregations see it). Failed rollouts are
// left alone: they carry no reward to hack.
func applyGuards(cfg GuardConfig, turn datasets.Turn, histWords map[string]bool, recs []rollout.Record) guardCounts {
	var c guardCounts
	answer := normalizeWords(turn.Answer)
	question := normalizeWords(turn.Question)
	for i := range recs {
		r := &recs[i]
		if r.Failed() {
			continue
		}
		rw := normalizeWords(r.Rewrite)
		hits := []struct {
			mode  string
			found bool
			count *int
		}{
			// The reference answer written into the query: retrieval and the
			// responder would be handed the label.
			{cfg.AnswerLeak, answer != "" && strings.Contains(" "+rw+" ", " "+answer+" ") &&
				!strings.Contains(" "+question+" ", " "+answer+" "), &c.leak},
			{cfg.Empty, rw == "", &c.empty},
			{cfg.TooLong, len(strings.Fields(rw)) > cfg.MaxRewriteWords, &c.tooLong},
			{cfg.CopiesHistory, copiesHistory(rw, histWords), &c.copiesHistory},
		}
		penalize := false
		for _, h := range hits {
			if !h.found || h.mode == "off" {
				continue
			}
			*h.count++
			penalize = penalize || h.mode == "penalty"
		}
		if penalize {
			r.RougeP, r.RougeR, r.RougeF1 = 0, 0, cfg.Penalty
			r.EM, r.Hit, r.SquadF1 = 0, 0, 0
			r.Reward = cfg.Penalty
		}
	}
	return c
}

func copiesHistory(rewrite string, hist map[string]bool) bool {
	if len(hist) < copyMinWords {
		return false
	}
	in := 0
	for w := range distinctWordSet(rewrite) {
		if hist[w] {
			in++
		}
	}
	return float64(in) >= copyCoverage*float64(len(hist))
}

// normalizeWords lowercases and keeps runs of letters and digits, joined by
// single spaces.
func normalizeWords(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}), " ")
}

func distinctWordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range strings.Fields(normalizeWords(s)) {
		set[w] = true
	}
	return set
}

// historyWords is the set of distinct words of a dialogue history.
func historyWords(hist []datasets.Message) map[string]bool {
	set := map[string]bool{}
	for _, m := range hist {
		for w := range distinctWordSet(m.Text) {
			set[w] = true
		}
	}
	return set
}
