// Package datasets holds the conversation and turn types, the loaders
// (normalized JSONL, Parquet, QReCC and TopiOCQA originals), prompt
// rendering for the rewriter, splits by conversation, the SFT and RL data
// preparation behind `himes prep`, and the long-term-memory input. The
// quickstart's demo data lives in datasets/demo (regenerate it with
// `go run ./scripts/mkdemo`).
//
// # The normalized schema (JSONL, one user turn per line)
//
//	{"conv_id": "cast20-81",            string (an integer is accepted); required
//	 "turn": 2,                         integer ≥ 1, or a string label such as
//	                                    CAsT 2022's "1-3"; required
//	 "history": [{"role": "user"|"assistant", "text": "..."}],
//	                                    earlier utterances, oldest first; may be [] or absent;
//	                                    "content" instead of "text" (the Hugging Face /
//	                                    OpenAI convention) is accepted, not both
//	 "question": "...",                 the user's question as asked; required key,
//	                                    null where the source has only a rewrite
//	 "rewrite": "..." | null,           the reference self-contained rewrite
//	 "answer": "...",                   the reference answer, "" or absent when none
//	 "answers": ["...", ...],           optional: several reference answers (SQuAD-style);
//	                                    answer defaults to the first. Rewards and
//	                                    evaluations take the best match over all
//	                                    (EM, F1 as SQuAD; Rouge-L as rouge-score)
//	 "passages": [{"id": "...",         grounding passages; id is a knowledge-base id
//	               "title", "text",     optional
//	               "relevance": 0–4,    optional graded judgment (CAsT); absent = unknown
//	               "answer_snippets": [...],  spans, or one list of spans per annotator
//	               "source": "..."}],   optional: where the judgment came from
//	 "meta": {...},                     source-specific fields, kept as they are
//	 "user": "..."}                     optional long-term-memory key (see below)
//
// A record must have a question or a rewrite. Unknown top-level or passage
// fields are errors (put extra fields under meta), as are a wrong type, an
// unknown role, a negative relevance, and a (conv_id, turn) seen twice in a
// file. Every error names the file, the line and the field, e.g.
//
//	data.jsonl:17: field "passages[2].id": is missing
//
// With LoadOptions.SkipBad such records are skipped and counted instead.
// LoadOptions.Columns (data.columns) renames a foreign export's fields first,
// e.g. {question: query, history: context}; errors then name the file's own
// field ("query").
// A string turn label that is not an integer is kept in Turn.TurnLabel (and
// written back as is); Turn.Turn is then the turn's position in its
// conversation (user messages in history + 1).
//
// # Parquet
//
// The same columns: conv_id (string), turn (int64), turn_label (string,
// null unless the source turn id is a label), history
// (list<struct<role: string, text: string>>; content instead of text is
// accepted), question (string), rewrite (string, null when none), answer
// (string), answers (list<string>, null when none), passages (list<struct<id,
// title, text: string, relevance: int32 (null = unknown), answer_snippets:
// list<string> (flattened), answer_snippet_sets: list<list<string>> (null
// unless the source grouped spans per annotator), source: string>>), meta
// (the JSON text of the object, null when none) and user (string, null when
// empty). WriteParquet and ReadParquet round-trip every Turn field; a reader
// accepts any integer width for turn and relevance, large strings, and
// answer_snippets as list<list<string>> (one list per annotator, as in JSONL
// and as DuckDB writes a JSONL file's grouped spans). Nested
// fields are checked as strictly as in JSONL: an unknown struct field of
// history or passages is an error naming it, never dropped.
//
// # Source formats
//
// QReCC's original JSON (an array of {Conversation_no, Turn_no, Context,
// Question, Rewrite, Answer, Answer_URL, ...}) and TopiOCQA's ({...,
// Gold_passage: {id, title, text}, Topic, ...}) load into the same Turn:
// Context (alternating user and assistant utterances, oldest first) becomes
// history, Gold_passage a passage, and every other field goes into meta
// under its lower-cased name (so TopiOCQA's Topic is meta.topic).
//
// # The user key
//
// Long-term memory groups historical queries by user. LoadOptions.UserField
// says what a user is: "conv_id" (the default), "topic" (meta.topic, e.g.
// CAsT 2022's topic number or TopiOCQA's Topic) or "meta.<key>".
package datasets
