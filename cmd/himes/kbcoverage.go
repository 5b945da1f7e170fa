package main

import (
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/himes-rl/himes/datasets"
)

// judgedSplit is one set of turns whose relevance judgments retrieval metrics
// (and retrieval rewards) read, named as the user knows it.
type judgedSplit struct {
	name  string // e.g. "data.eval"
	file  string
	turns []datasets.Turn
}

// judgedCoverage is how many of a split's judged-relevant passages the
// knowledge base holds.
type judgedCoverage struct {
	judged, present int
	missing         []string // sorted, the first few
}

// checkJudgedCoverage compares the passages judged relevant in each split with
// the knowledge base (has reports membership; checked false means there is no
// KB to ask, and nothing is checked). A split whose judged passages are all
// absent would score Recall@10 = 0 on every turn, silently: that is an error
// naming the KB and the split. A partly covered split is a warning with the
// counts, since shared collections often judge passages a KB subset lacks.
func checkJudgedCoverage(kb string, splits []judgedSplit, has func(id string) (has, checked bool), log *slog.Logger) error {
	for _, s := range splits {
		cov, checked := coverage(s.turns, has)
		if !checked || cov.judged == 0 {
			continue
		}
		switch {
		case cov.present == 0:
			return fmt.Errorf("data.kb %s holds none of the %d passages judged relevant in %s %s (e.g. %s): every retrieval metric would be 0; is data.kb the collection these judgments refer to?",
				kb, cov.judged, s.name, s.file, strings.Join(cov.missing, ", "))
		case cov.present < cov.judged:
			log.Warn("knowledge base lacks some judged passages: their turns' retrieval metrics cannot reach 1",
				"kb", kb, "split", s.name, "file", s.file, "judged", cov.judged, "in_kb", cov.present,
				"missing", cov.judged-cov.present, "e.g.", strings.Join(cov.missing, ", "))
		}
	}
	return nil
}

// coverage counts the distinct judged-relevant passages of turns (relevance
// ≥ 1, as the metrics read them) and those the KB has.
func coverage(turns []datasets.Turn, has func(string) (bool, bool)) (judgedCoverage, bool) {
	const examples = 3
	seen := map[string]bool{}
	var c judgedCoverage
	var missing []string
	for _, t := range turns {
		for id, rel := range t.Qrels() {
			if rel < 1 || seen[id] {
				continue
			}
			seen[id] = true
			ok, checked := has(id)
			if !checked {
				return judgedCoverage{}, false
			}
			c.judged++
			if ok {
				c.present++
			} else {
				missing = append(missing, id)
			}
		}
	}
	sort.Strings(missing)
	c.missing = missing[:min(examples, len(missing))]
	return c, true
}
