// Package evaluate runs rewriters (raw question, concatenated history, human
// rewrite, a trained policy, an Ollama model) through the whole HiMeS
// pipeline on held-out turns and reports the HSER terms and IR metrics per
// system, with bootstrap intervals over conversations and paired tests
// against the raw question (`himes eval`). The statistics live in
// internal/stats, shared with the ablations.
package evaluate
