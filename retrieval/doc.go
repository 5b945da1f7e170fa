// Package retrieval is the knowledge-base retrieval and long-term memory of
// himes: what every rollout and evaluation goes through.
//
// Knowledge base: LoadKB reads {id, title, text} passages from JSONL or
// Parquet, or a Pyserini/Anserini {id, contents} collection (bad records
// are errors naming file and line); ChunkPassages cuts
// overlapping word windows ("<passage id>#<i>").
//
// BM25: Index is Lucene's BM25 (idf = ln(1 + (N − df + 0.5)/(df + 0.5)),
// tf/(tf + k1·(1 − b + b·|d|/avgdl)), defaults k1 = 0.9, b = 0.4) over
// block-compressed postings. Indexes of up to 65,536 documents are searched
// term at a time into a dense accumulator (from postings kept decoded with
// their saturated tf when there are at most 2M), larger ones with
// document-at-a-time MaxScore; both keep a size-k heap, and Search returns
// exactly what the exhaustive SearchExhaustive returns. Ties go to the higher document number, and documents are numbered
// in ascending id order, so rankings sort the way trec_eval sorts (score
// desc, docno desc). SaveIndex/LoadIndex persist it (format-versioned,
// SHA-256 checked, bound to the KB's fingerprint, chunking, k1/b and
// analyzer, and scoring). BuildDiskIndex/OpenDiskIndex are the on-disk
// layout for large corpora: built streaming from the KB file (sorted runs
// spilled and merged), memory-mapped with the chunks' texts, ranking exactly
// as the in-memory index (exact scoring only). The default analyzer is the
// reference numbers' tokenization (lowercase [a-z0-9] runs); "english" adds
// Snowball stopwords and stemming; "lucene-english" is Pyserini's default
// analyzer. Scoring "lucene" computes Lucene's float32 scores (see
// luceneStats).
//
// Dense: embedding.Embedder (HashEmbedder: signed feature hashing of unigrams and
// bigrams; OllamaEmbedder: /api/embed, batched, disk cache keyed by model
// and text hash), DenseIndex (exact cosine by one BLAS sgemv), RRF for
// hybrid BM25 + dense.
//
// Long-term memory (HiMeS §7–9): MemoryStore holds each user's historical
// queries {user, query, time, topic, subtopic, embedding}, partitioned by a
// Taxonomy (a default of 16 topics plus a catch-all ships embedded) with an
// EmbeddingClassifier (nearest label description) or an OllamaClassifier
// (chat output constrained by a JSON schema to the labels). Activate picks
// H_n: the query's partition, widened to neighbouring partitions while too
// small, top-n by cosine, never the query itself. Rerank scores candidate c
// by mean over h ∈ H_n of cos(E(c), E(h)) (optionally fused with the
// retrieval score). SaveMemory/LoadMemory persist partitions as Parquet.
//
// Services (PROTOCOL.md): method "remote" calls a retrieval service over
// Search-R1's POST /retrieve protocol (Remote), "elasticsearch" an
// Elasticsearch/OpenSearch index by _msearch (Elastic), both through
// internal/httpcall; the documents they return become chunks, checked
// (ResultError) and, with a knowledge base, matched against its ids.
// NewHandler serves a pipeline's first stage over the same protocol
// (`himes retrieval serve`). RetrieveBatch retrieves a step's rewrites in
// one call per batch.
//
// Pipeline ties it together: Open(ctx, cfg, kbPath) then Retrieve(ctx, user,
// rewrite, query) → ranked chunks and a trace (candidates, activated
// memories, final scores). RecipRank, NDCGCut and Recall are trec_eval
// 10.0's recip_rank, ndcg_cut_k and recall_k; WriteTRECRun writes runs.
package retrieval
