// Package evaluate is himes's one evaluator. Its core (evaluator.go) scores
// a turn's passage ranking (ScoreRanking), groups turns into conversations
// (Conversations) and estimates means with cluster-bootstrap intervals and
// paired tests over them (Estimate, Compare, on internal/stats); the
// training loop's evaluations (grpo), `himes eval` and the ablations all
// call it. On top, Evaluate runs rewriters (raw question, concatenated
// history, human rewrite, a trained policy, an Ollama model) through the
// whole HiMeS pipeline on held-out turns and reports the HSER terms and IR
// metrics per system, compared with the raw question (`himes eval`).
// evaluate/ir holds the IR measures and the TREC files.
package evaluate
