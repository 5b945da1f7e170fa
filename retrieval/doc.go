// Package retrieval is the retrieval pipeline of himes: what every rollout
// and evaluation goes through.
//
// Pipeline ties it together: Open(ctx, cfg, kbPath) loads the knowledge
// base (package corpus) and builds or loads its index, then Retrieve(ctx,
// user, rewrite, query) → ranked chunks and a trace (candidates, activated
// memories, final scores).
//
// BM25: Index is Lucene's BM25 (idf = ln(1 + (N − df + 0.5)/(df + 0.5)),
// tf/(tf + k1·(1 − b + b·|d|/avgdl)), defaults k1 = 0.9, b = 0.4) over
// block-compressed postings of the terms an analyzer (package analysis)
// gives. Indexes of up to 65,536 documents are searched term at a time into
// a dense accumulator (from postings kept decoded with their saturated tf
// when there are at most 2M), larger ones with document-at-a-time MaxScore;
// both keep the k best in one top-k selection (topK), and Search returns
// exactly what the exhaustive SearchExhaustive returns. Ties go to the
// higher document number, and documents are numbered in ascending id order,
// so rankings sort the way trec_eval sorts (score desc, docno desc).
// SaveIndex/LoadIndex persist it (format-versioned, SHA-256 checked, bound
// to the KB's fingerprint, chunking, k1/b, analyzer and scoring).
// BuildDiskIndex/OpenDiskIndex are the on-disk layout for large corpora:
// built streaming from the KB file (sorted runs spilled and merged),
// memory-mapped with the chunks' texts, ranking exactly as the in-memory
// index. Scoring "lucene" computes Lucene's float32 scores (see
// luceneStats).
//
// Dense: an embedder (package embedding) and DenseIndex (exact cosine by
// one BLAS sgemv); RRF fuses BM25 and dense for hybrid.
//
// Long-term memory (package memory) re-ranks: RetrieveAt activates the
// user's memories with the original query, and when the most similar is
// close enough to it, Rerank scores candidate c by the mean over h ∈ H_n of
// cos(E(c), E(h)), fused with the retrieval score. CausalRetriever keeps
// memory causal (a turn never sees its own or a later question) and
// AttachMemory builds it from the data.
//
// Services (package service): with method "remote" or "elasticsearch" the
// first stage is a retrieval service; the documents it returns become
// chunks, checked and, with a knowledge base, matched against its ids, and
// RetrieveBatch retrieves a step's rewrites in one call per batch.
//
// RecipRank, NDCGCut and Recall are trec_eval 10.0's recip_rank, ndcg_cut_k
// and recall_k; WriteTRECRun writes runs.
package retrieval
