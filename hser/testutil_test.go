package hser

import (
	"testing"
)

func mustScorer(t testing.TB, cfg Config) *Scorer {
	t.Helper()
	s, err := NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rougeCfg(stem bool) Config {
	c := DefaultConfig()
	c.Tokenizer = TokenizerRougeScore
	c.Stem = stem
	return c
}
