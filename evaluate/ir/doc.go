// Package ir holds the information-retrieval side of evaluation, with
// trec_eval 10.0's definitions: the per-query measures himes reports
// (reciprocal rank, nDCG@k, recall@k), a trec_eval reimplementation, and
// the TREC file formats (run files, qrels, the query files `himes search`
// ranks for). Rankings are retrieval.Scored lists of passage ids.
package ir
