// Package hser is the HSER reward of HiMeS:
//
//	R = RougeL_F1(answer, reference) + α·EM(answer, reference) + β·Hit
//
// and the text normalization it rests on. A Scorer (NewScorer) computes one
// Score per (prediction, reference, retrieved context) with every term, the
// weights and the total.
//
// Two tokenizers feed Rouge-L:
//
//   - "rouge-score" reproduces Google's rouge-score RougeScorer(["rougeL"],
//     use_stemmer=...) bit for bit, with NLTK's PorterStemmer
//     (NLTK_EXTENSIONS mode) for stemming. It only knows [a-z0-9]: any CJK
//     text scores 0. The reward's EM is SQuAD v1.1's, bit-exact (see
//     NormalizeAnswer).
//   - "unicode" (the default) keeps words in every script and makes each
//     CJK ideograph, kana and hangul syllable a token (see
//     appendUnicodeTokens for the exact rules). The reward's EM compares the
//     unicode tokens without the articles a, an and the — SQuAD's
//     normalization carried over to all scripts, but not SQuAD's ("2,000"
//     and "2000" are two tokens and one).
//
// Whatever the tokenizer, Score.SquadEM and Score.SquadF1 are the official
// SQuAD v1.1 script's EM and F1, bit-exact: a metric named after SQuAD is
// SQuAD's number. Config.EMNormalization and EMLabel name the reward EM's.
//
// Hit is 1 when the normalized answer (the prediction; with Hit "gold", the
// reference) is non-empty and occurs on token boundaries in one chunk of the
// retrieved content, normalized the same way. An empty, whitespace-only or
// punctuation-only answer never hits, so a silent responder cannot collect β.
//
// Rouge-L's LCS is computed bit-parallel over interned token ids (see
// lcsBits); a scorer reuses pooled scratch buffers, so scoring does not
// allocate in steady state and is safe for concurrent use.
//
// ASCII text, where both tokenizers make the same tokens, takes a fast path
// (scan.go): one pass classifies 64-byte blocks eight bytes at a time into
// bit masks and finds the tokens and the SQuAD field breaks from the masks'
// edges; a second packs each token of up to 16 bytes into two words that
// are its own hash-table key and interns it, in a table emptied by a
// generation counter instead of clearing. The same pass gives the SQuAD
// tokens (whitespace-separated fields, punctuation deleted) as ids, so EM
// and F1 need no second normalization. With stemming, each distinct token is
// stemmed once through a fixed-size memo. The unicode EM reuses the Rouge
// ids (the articles are ids 0–2). Other text takes the general tokenizers;
// both paths give the same tokens and scores on ASCII text, which the tests
// check on random text, the NLTK vocabulary and by fuzzing.
//
// Most other text takes the fast path too, with each non-ASCII character
// blanked to as many ASCII bytes (blankText): a separator (’ “ ” — …,
// no-break spaces: most non-ASCII text in real answers) to a space or '*',
// and, with the unicode tokenizer unstemmed, a letter or number that NFC
// and its neighbours leave alone (é, ß, Cyrillic; not CJK, which is split
// per character, nor combining marks) to 'x'. A field (whitespace-separated
// run) holding a non-space one is an xfield: SQuAD keeps those characters
// inside its tokens ("don’t" stays one token, "the’s" loses its article),
// so an xfield's SQuAD tokens are normalize_answer of its original text
// (normalize_answer is local to fields), and its Rouge tokens holding an
// 'x' are case-folded from the original. rouge-score's tokenizer separates
// on every non-ASCII character but K (U+212A) and İ, so it keeps the fast
// path on nearly any text. The rest (CJK, marks, text not in NFC, stemmed
// unicode text with letters) takes the general tokenizers. With a context,
// Hit's normalized answers are joined from the interned ids.
//
// A GRPO step scores its G answers against one reference: on the ASCII
// fast path the reference is interned first, and the pooled scratch keeps
// it so prepared (its keys, ids, SQuAD ids, normalizations and stems).
// When the next pair on that scratch has the same reference, only the
// prediction is scanned and interned, after the last prediction's keys
// are taken out of the table again. Ids are compared only for equality,
// so the scores are those of scoring the pair whole, bit for bit.
package hser
