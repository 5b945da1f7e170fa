package corpus

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/himes-rl/himes/internal/parquetfile"
)

// Zipf generates a synthetic corpus for tests and benchmarks: a
// vocabulary of vocab words ("w0", "w1", … by frequency rank) drawn from a
// Zipf distribution with exponent s (> 1; natural text is ≈ 1.07), document
// lengths uniform in [meanLen/2, 3·meanLen/2]. Document ids are "doc%08d",
// so they sort in generation order. The same seed gives the same corpus.
func Zipf(seed uint64, docs, vocab, meanLen int, s float64) (ids, texts []string) {
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
// Zipf, skipping the most frequent skip ranks (stopword-like terms
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

// WriteZipfKB streams the corpus of Zipf (same seed, same texts) to w
// as a JSONL knowledge base of {"id", "text"} records, holding one
// document at a time: benchmarks build corpora larger than memory with it.
func WriteZipfKB(w io.Writer, seed uint64, docs, vocab, meanLen int, s float64) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var b []byte
	err := zipfPassages(seed, docs, vocab, meanLen, s, func(id, text []byte) error {
		b = append(append(append(append(b[:0], `{"id":"`...), id...), `","text":"`...), text...)
		_, err := bw.Write(append(b, "\"}\n"...))
		return err
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// WriteZipfKBParquet writes the passages of WriteZipfKB (same arguments,
// same passages) as a Parquet KB with id and text columns, streamed in row
// groups of 65,536 passages.
func WriteZipfKBParquet(w io.Writer, seed uint64, docs, vocab, meanLen int, s float64) error {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	// Encode, not WriteFile: w is the caller's (a benchmark's corpus file).
	return parquetfile.Encode(w, schema, parquetfile.Options{Snappy: true}, func(fw *parquetfile.Writer) error {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		flush := func() error {
			rec := b.NewRecordBatch()
			defer rec.Release()
			if rec.NumRows() == 0 {
				return nil
			}
			return fw.Write(rec)
		}
		n := 0
		err := zipfPassages(seed, docs, vocab, meanLen, s, func(id, text []byte) error {
			b.Field(0).(*array.StringBuilder).BinaryBuilder.Append(id)
			b.Field(1).(*array.StringBuilder).BinaryBuilder.Append(text)
			if n++; n%65536 == 0 {
				return flush()
			}
			return nil
		})
		if err != nil {
			return err
		}
		return flush()
	})
}

// zipfPassages generates the passages both writers write, in order.
func zipfPassages(seed uint64, docs, vocab, meanLen int, s float64, emit func(id, text []byte) error) error {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, s, 1, uint64(vocab-1))
	var id, text []byte
	for d := range docs {
		id = fmt.Appendf(id[:0], "doc%08d", d)
		text = text[:0]
		n := meanLen/2 + r.IntN(meanLen+1)
		for i := range n {
			if i > 0 {
				text = append(text, ' ')
			}
			text = append(text, 'w')
			text = strconv.AppendUint(text, z.Uint64(), 10)
		}
		if err := emit(id, text); err != nil {
			return err
		}
	}
	return nil
}
