package retrieval

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// ZipfCorpus generates a synthetic corpus for tests and benchmarks: a
// vocabulary of vocab words ("w0", "w1", … by frequency rank) drawn from a
// Zipf distribution with exponent s (> 1; natural text is ≈ 1.07), document
// lengths uniform in [meanLen/2, 3·meanLen/2]. Document ids are "doc%08d",
// so they sort in generation order. The same seed gives the same corpus.
func ZipfCorpus(seed uint64, docs, vocab, meanLen int, s float64) (ids, texts []string) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, s, 1, uint64(vocab-1))
	ids = make([]string, docs)
	texts = make([]string, docs)
	var b strings.Builder
	for d := range docs {
		ids[d] = fmt.Sprintf("doc%08d", d)
		n := meanLen/2 + r.IntN(meanLen+1)
		b.Reset()
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteByte('w')
			b.WriteString(strconv.FormatUint(z.Uint64(), 10))
		}
		texts[d] = b.String()
	}
	return ids, texts
}

// ZipfQueries draws n queries of 2..8 terms from the same distribution as
// ZipfCorpus, skipping the most frequent skip ranks (stopword-like terms
// that real queries rarely consist of).
func ZipfQueries(seed uint64, n, vocab, skip int, s float64) [][]string {
	r := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	z := rand.NewZipf(r, s, 1, uint64(vocab-1))
	out := make([][]string, n)
	for i := range out {
		m := 2 + r.IntN(7)
		for len(out[i]) < m {
			w := z.Uint64()
			if int(w) < skip {
				continue
			}
			out[i] = append(out[i], "w"+strconv.FormatUint(w, 10))
		}
	}
	return out
}

// WriteZipfKB streams the corpus of ZipfCorpus (same seed, same texts) to w
// as a JSONL knowledge base of {"id", "text"} records, holding one
// document at a time: benchmarks build corpora larger than memory with it.
func WriteZipfKB(w io.Writer, seed uint64, docs, vocab, meanLen int, s float64) error {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, s, 1, uint64(vocab-1))
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte
	for d := range docs {
		b = fmt.Appendf(b[:0], `{"id":"doc%08d","text":"`, d)
		n := meanLen/2 + r.IntN(meanLen+1)
		for i := range n {
			if i > 0 {
				b = append(b, ' ')
			}
			b = append(b, 'w')
			b = strconv.AppendUint(b, z.Uint64(), 10)
		}
		b = append(b, "\"}\n"...)
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}
