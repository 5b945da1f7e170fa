package embedded

import "github.com/himes-rl/himes/trainer"

// Candidate is one candidate term of a dialogue as the embedded policy ranks
// it, with its features by name (those that need no knowledge-base
// statistics: idf, in_kb and the NPMI features are left out, and so is the
// constant bias). scripts/candparity prints them so that the reference
// trainer's Python copy (scripts/lora_trainer candidates.py) is checked
// against this one on every shared collection.
type Candidate struct {
	Term     string             `json:"term"`
	Features map[string]float64 `json:"features"`
}

// statFeatures are φ's components that depend on TermStats, or constant.
var statFeatures = map[int]bool{featBias: true, featIDF: true, featInKB: true, featNPMIMax: true, featNPMIMean: true, featNPMIGap: true}

// Candidates returns the ranked candidate terms of d, at most limit, and
// whether the cap cut some off: what the policy decides on for this dialogue.
func Candidates(d trainer.Dialogue, limit int) ([]Candidate, bool) {
	cands, cut := candidates(contextOf(trainer.Prompt{Dialogue: &d}), nil, limit)
	out := make([]Candidate, len(cands))
	for i, c := range cands {
		f := make(map[string]float64, numFeatures)
		for k, v := range c.phi {
			if !statFeatures[k] {
				f[featureNames[k]] = v
			}
		}
		out[i] = Candidate{Term: c.term, Features: f}
	}
	return out, cut
}
