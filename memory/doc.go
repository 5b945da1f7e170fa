// Package memory is HiMeS's long-term memory (§7–9 of the paper): each
// user's facts and earlier questions, partitioned by topic and subtopic,
// and the activation that picks H_n for a query.
//
// A Store holds the memories {user, id, text, time, seq, topic, subtopic,
// importance, entities, embedding}, partitioned by a Taxonomy (a default of
// 16 topics plus a catch-all ships embedded) with an EmbeddingClassifier
// (nearest label description) or an OllamaClassifier (chat output
// constrained by a JSON schema to the labels). ActivateAt picks H_n: the
// query's partition, widened to neighbouring partitions while too small,
// scored by the weighted signals of Score (cosine, topic, recency,
// importance, entities), never the query itself nor a question asked at or
// after the query's position in its user's history (History), so memory is
// causal. Quantized stores score the codes of a Quantizer instead of
// float32 vectors. Save/Load persist a store as Parquet; ReadJSONL reads
// memories a user supplies.
//
// The retrieval pipeline (package retrieval) embeds the query, activates
// the store and re-ranks its candidates with the activated memories.
package memory
