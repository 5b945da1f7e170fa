// Command bench compares the himes BM25 index with bleve v2 (scorch, in
// memory) on a generated Zipfian corpus: indexing throughput, query
// throughput for 2–8-term queries, memory, and top-10 agreement with a
// straightforward exhaustive BM25 reference. See README.md.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/unicode"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/corpus"
)

type params struct {
	// KB and QueryFile replace the Zipf corpus and queries with a real
	// knowledge base (JSONL: "text", optional "title") and query file (one
	// query a line, or JSONL with "question"); both are reduced to the
	// plain analyzer's lowercase [a-z0-9]+ tokens, which every engine and
	// the reference then split alike.
	KB, QueryFile                       string
	Reps, QueryRounds                   int
	MemProfile                          string
	Docs, Vocab, MeanLen, Queries, Skip int
	S                                   float64
	Seed                                uint64
	K1, B                               float64
}

// result is what one engine's child process reports.
type result struct {
	Engine     string     `json:"engine"`
	IndexSecs  float64    `json:"index_secs"`
	DocsPerSec float64    `json:"docs_per_sec"`
	QPS        float64    `json:"qps"`
	HeapBytes  uint64     `json:"heap_bytes"` // live heap after indexing (GC'd), corpus excluded
	Top10      [][]string `json:"top10"`
	MaxRSS     int64      `json:"max_rss"` // filled by the parent
}

func main() {
	var p params
	engine := flag.String("engine", "", "run one engine (himes, bleve, reference, corpus) and print JSON; empty runs all of them as child processes")
	flag.IntVar(&p.Docs, "docs", 100000, "documents")
	flag.IntVar(&p.Vocab, "vocab", 50000, "vocabulary size")
	flag.IntVar(&p.MeanLen, "len", 60, "mean document length (words)")
	flag.IntVar(&p.Queries, "queries", 2000, "queries (2–8 terms each)")
	flag.IntVar(&p.Skip, "skip", 20, "query terms skip the most frequent ranks (stopword-like)")
	flag.Float64Var(&p.S, "s", 1.07, "Zipf exponent")
	flag.Uint64Var(&p.Seed, "seed", 1, "corpus and query seed")
	flag.Float64Var(&p.K1, "k1", 0.9, "BM25 k1")
	flag.Float64Var(&p.B, "b", 0.4, "BM25 b")
	flag.StringVar(&p.KB, "kb", "", "a real knowledge base (JSONL with text and optional title) instead of the Zipf corpus")
	flag.StringVar(&p.QueryFile, "queryfile", "", "real queries (one a line, or JSONL with question) instead of Zipf queries; needs -kb")
	flag.StringVar(&p.MemProfile, "memprofile", "", "with -engine himes or bleve: write a heap profile of the live index (after GC) to this file")
	flag.IntVar(&p.QueryRounds, "qrounds", 1, "run the queries this many times for queries/s (a small query file takes milliseconds)")
	flag.IntVar(&p.Reps, "reps", 3, "repetitions of himes and bleve, interleaved (himes bleve, bleve himes, ...); medians reported")
	flag.Parse()
	if p.MemProfile != "" {
		runtime.MemProfileRate = 1 // every allocation, not a sample
	}
	if *engine != "" {
		r, err := runEngine(*engine, p)
		if err != nil {
			log.Fatal(err)
		}
		if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := compare(p); err != nil {
		log.Fatal(err)
	}
}

func compare(p params) error {
	if p.KB != "" {
		fmt.Printf("corpus: %s; queries: %s; GOMAXPROCS=%d\n", p.KB, p.QueryFile, runtime.GOMAXPROCS(0))
	} else {
		fmt.Printf("corpus: %d docs, Zipf(s=%.2f) over %d words, mean length %d; %d queries of 2–8 terms; GOMAXPROCS=%d\n",
			p.Docs, p.S, p.Vocab, p.MeanLen, p.Queries, runtime.GOMAXPROCS(0))
	}
	run := func(e string) (result, error) {
		cmd := exec.Command(os.Args[0], append([]string{"-engine", e}, os.Args[1:]...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the benchmark
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", e, err)
		}
		var r result
		if err := json.Unmarshal(out, &r); err != nil {
			return result{}, fmt.Errorf("%s: %w", e, err)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.MaxRSS = ru.Maxrss * 1024 // Linux reports KiB
		}
		return r, nil
	}
	res := map[string]result{}
	for _, e := range []string{"corpus", "reference"} {
		r, err := run(e)
		if err != nil {
			return err
		}
		res[e] = r
	}
	// A and B interleaved, the order alternating, so a change of load
	// during the run falls on both: the figures are medians over the reps.
	reps := map[string][]result{}
	for i := range max(1, p.Reps) {
		order := []string{"himes", "bleve"}
		if i%2 == 1 {
			order = []string{"bleve", "himes"}
		}
		for _, e := range order {
			r, err := run(e)
			if err != nil {
				return err
			}
			reps[e] = append(reps[e], r)
			fmt.Printf("rep %d %-5s: %.0f docs/s, %.0f queries/s, heap %.2f MiB, peak RSS %.1f MiB, load %s\n",
				i+1, e, r.DocsPerSec, r.QPS, float64(r.HeapBytes)/(1<<20), float64(r.MaxRSS)/(1<<20), loadavg())
		}
	}
	for e, rs := range reps {
		res[e] = medianResult(rs)
	}
	ref, h, b, base := res["reference"], res["himes"], res["bleve"], res["corpus"]
	agree := func(r result) (exact, overlap float64) {
		for i := range ref.Top10 {
			if slices.Equal(r.Top10[i], ref.Top10[i]) {
				exact++
			}
			n := 0
			for _, d := range r.Top10[i] {
				if slices.Contains(ref.Top10[i], d) {
					n++
				}
			}
			if len(ref.Top10[i]) > 0 {
				overlap += float64(n) / float64(len(ref.Top10[i]))
			} else if len(r.Top10[i]) == 0 {
				overlap++
			}
		}
		q := float64(len(ref.Top10))
		return 100 * exact / q, 100 * overlap / q
	}
	he, ho := agree(h)
	be, bo := agree(b)
	mib := func(x float64) string { return fmt.Sprintf("%.1f MiB", x/(1<<20)) }
	fmt.Printf("\nmedians of %d interleaved repetitions\n%-22s %14s %14s %10s\n", max(1, p.Reps), "", "himes", "bleve", "ratio")
	fmt.Printf("%-22s %14.0f %14.0f %9.1f×\n", "indexing docs/s", h.DocsPerSec, b.DocsPerSec, h.DocsPerSec/b.DocsPerSec)
	fmt.Printf("%-22s %14.0f %14.0f %9.1f×\n", "queries/s (top-10)", h.QPS, b.QPS, h.QPS/b.QPS)
	fmt.Printf("%-22s %14s %14s %9.2f×\n", "index heap", mib(float64(h.HeapBytes)), mib(float64(b.HeapBytes)), float64(h.HeapBytes)/float64(b.HeapBytes))
	fmt.Printf("%-22s %14s %14s %9.2f×\n", "peak RSS (process)", mib(float64(h.MaxRSS)), mib(float64(b.MaxRSS)), float64(h.MaxRSS)/float64(b.MaxRSS))
	hr, br := float64(h.MaxRSS-base.MaxRSS), float64(b.MaxRSS-base.MaxRSS)
	fmt.Printf("%-22s %14s %14s %9.2f×\n", "peak RSS − corpus", mib(hr), mib(br), hr/br)
	fmt.Printf("%-22s %13.1f%% %13.1f%%\n", "top-10 = reference", he, be)
	fmt.Printf("%-22s %13.1f%% %13.1f%%\n", "top-10 overlap", ho, bo)
	fmt.Printf("(corpus-only process peak RSS %s: the generated texts and queries every engine also holds)\n", mib(float64(base.MaxRSS)))
	return nil
}

func runEngine(engine string, p params) (result, error) {
	ids, texts, queries, err := load(p)
	if err != nil {
		return result{}, err
	}
	r := result{Engine: engine}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	switch engine {
	case "corpus":
		runtime.KeepAlive(ids)
		runtime.KeepAlive(texts)
		runtime.KeepAlive(queries)
		return r, nil
	case "reference":
		r.Top10 = referenceTop10(texts, queries, p.K1, p.B)
		return r, nil
	case "himes":
		start := time.Now()
		ix, err := retrieval.BuildIndex(ids, texts, retrieval.BM25Params{K1: p.K1, B: p.B})
		if err != nil {
			return r, err
		}
		r.IndexSecs = time.Since(start).Seconds()
		r.HeapBytes = heapSince(before)
		if err := writeHeapProfile(p.MemProfile); err != nil {
			return r, err
		}
		start = time.Now()
		for range max(1, p.QueryRounds) {
			r.Top10 = make([][]string, len(queries))
			for i, q := range queries {
				for _, h := range ix.Search(q, 10) {
					r.Top10[i] = append(r.Top10[i], ix.ID(h.Doc))
				}
			}
		}
		r.QPS = float64(max(1, p.QueryRounds)*len(queries)) / time.Since(start).Seconds()
		runtime.KeepAlive(ix)
	case "bleve":
		idx, secs, err := bleveIndex(ids, texts)
		if err != nil {
			return r, err
		}
		defer idx.Close()
		r.IndexSecs = secs
		r.HeapBytes = heapSince(before)
		if err := writeHeapProfile(p.MemProfile); err != nil {
			return r, err
		}
		start := time.Now()
		for range max(1, p.QueryRounds) {
			r.Top10 = make([][]string, len(queries))
			for i, q := range queries {
				// a disjunction of term queries: every document with any term
				var qs []query.Query
				for _, t := range q {
					tq := bleve.NewTermQuery(t)
					tq.SetField("text")
					qs = append(qs, tq)
				}
				req := bleve.NewSearchRequestOptions(bleve.NewDisjunctionQuery(qs...), 10, 0, false)
				res, err := idx.Search(req)
				if err != nil {
					return r, err
				}
				for _, h := range res.Hits {
					r.Top10[i] = append(r.Top10[i], h.ID)
				}
			}
		}
		r.QPS = float64(max(1, p.QueryRounds)*len(queries)) / time.Since(start).Seconds()
	default:
		return r, fmt.Errorf("unknown engine %q", engine)
	}
	r.DocsPerSec = float64(len(ids)) / r.IndexSecs
	runtime.KeepAlive(texts)
	return r, nil
}

// writeHeapProfile writes the live heap (after a GC) to path, if set.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func heapSince(before runtime.MemStats) uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

// bleveIndex builds an in-memory scorch index with bleve's "bm25" scoring
// model and an analyzer equivalent to ours on this corpus (unicode words,
// lowercased, no stopwords, no stemming); nothing stored, no term vectors,
// no doc values, no _all field.
func bleveIndex(ids, texts []string) (bleve.Index, float64, error) {
	m := bleve.NewIndexMapping()
	m.ScoringModel = "bm25"
	if err := m.AddCustomAnalyzer("plain", map[string]any{
		"type": custom.Name, "tokenizer": unicode.Name, "token_filters": []string{lowercase.Name},
	}); err != nil {
		return nil, 0, err
	}
	fm := mapping.NewTextFieldMapping()
	fm.Analyzer = "plain"
	fm.Store, fm.IncludeTermVectors, fm.IncludeInAll, fm.DocValues = false, false, false, false
	dm := bleve.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt("text", fm)
	m.DefaultMapping = dm
	m.DefaultAnalyzer = "plain"
	idx, err := bleve.NewUsing("", m, scorch.Name, scorch.Name, nil)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	b := idx.NewBatch()
	for i := range ids {
		if err := b.Index(ids[i], map[string]string{"text": texts[i]}); err != nil {
			return nil, 0, err
		}
		if b.Size() == 1000 {
			if err := idx.Batch(b); err != nil {
				return nil, 0, err
			}
			b = idx.NewBatch()
		}
	}
	if err := idx.Batch(b); err != nil {
		return nil, 0, err
	}
	return idx, time.Since(start).Seconds(), nil
}

// referenceTop10 is the straightforward exhaustive BM25, written from the
// formula independently of the index: for each query, scan every document,
// count query-term frequencies, score every document with a match, sort all
// of them (score desc, id desc — ids "doc%08d" sort like positions), keep
// 10. Lucene form: idf = ln(1 + (N − df + 0.5)/(df + 0.5)),
// tf/(tf + k1·(1 − b + b·|d|/avgdl)), distinct query terms, exact lengths.
func referenceTop10(texts []string, queries [][]string, k1, b float64) [][]string {
	toks := make([][]string, len(texts))
	df := map[string]int{}
	total := 0
	for d, t := range texts {
		toks[d] = strings.Fields(t) // corpus words are already lowercase [a-z0-9]+
		total += len(toks[d])
		seen := map[string]bool{}
		for _, w := range toks[d] {
			if !seen[w] {
				seen[w] = true
				df[w]++
			}
		}
	}
	n := float64(len(texts))
	avgdl := float64(total) / n
	out := make([][]string, len(queries))
	type hit struct {
		d int
		s float64
	}
	for qi, q := range queries {
		var terms []string
		for _, t := range q {
			if df[t] > 0 && !slices.Contains(terms, t) {
				terms = append(terms, t)
			}
		}
		var hits []hit
		tf := make([]int, len(terms))
		for d, ws := range toks {
			clear(tf)
			matched := false
			for _, w := range ws {
				for j, t := range terms {
					if w == t {
						tf[j]++
						matched = true
					}
				}
			}
			if !matched {
				continue
			}
			norm := k1 * (1 - b + b*float64(len(ws))/avgdl)
			s := 0.0
			for j, t := range terms {
				if tf[j] == 0 {
					continue
				}
				idf := math.Log(1 + (n-float64(df[t])+0.5)/(float64(df[t])+0.5))
				f := float64(tf[j])
				s += float64(idf * float64(f/float64(f+norm)))
			}
			hits = append(hits, hit{d, s})
		}
		slices.SortFunc(hits, func(a, b hit) int {
			switch {
			case a.s > b.s:
				return -1
			case a.s < b.s:
				return 1
			}
			return b.d - a.d
		})
		for _, h := range hits[:min(10, len(hits))] {
			out[qi] = append(out[qi], fmt.Sprintf("doc%08d", h.d))
		}
	}
	return out
}

// load is the corpus and the queries: the Zipf ones, or -kb and -queryfile
// reduced to plain tokens (ids "doc%08d" by position, as the Zipf corpus's).
func load(p params) (ids, texts []string, queries [][]string, err error) {
	if p.KB == "" {
		if p.QueryFile != "" {
			return nil, nil, nil, fmt.Errorf("-queryfile needs -kb")
		}
		ids, texts = corpus.Zipf(p.Seed, p.Docs, p.Vocab, p.MeanLen, p.S)
		return ids, texts, corpus.ZipfQueries(p.Seed+1, p.Queries, p.Vocab, p.Skip, p.S), nil
	}
	if p.QueryFile == "" {
		return nil, nil, nil, fmt.Errorf("-kb needs -queryfile")
	}
	plain := func(s string) []string {
		var out []string
		analysis.ForEachPlainToken(s, func(t []byte) { out = append(out, string(t)) })
		return out
	}
	err = eachLine(p.KB, func(n int, line []byte) error {
		var d struct{ Title, Text string }
		if err := json.Unmarshal(line, &d); err != nil {
			return fmt.Errorf("%s:%d: %w", p.KB, n, err)
		}
		ids = append(ids, fmt.Sprintf("doc%08d", len(ids)))
		texts = append(texts, strings.Join(plain(d.Title+" "+d.Text), " "))
		return nil
	})
	if err != nil {
		return nil, nil, nil, err
	}
	err = eachLine(p.QueryFile, func(n int, line []byte) error {
		q := string(line)
		if strings.HasPrefix(strings.TrimSpace(q), "{") {
			var d struct{ Question string }
			if err := json.Unmarshal(line, &d); err != nil {
				return fmt.Errorf("%s:%d: %w", p.QueryFile, n, err)
			}
			q = d.Question
		}
		if t := plain(q); len(t) > 0 {
			queries = append(queries, t)
		}
		return nil
	})
	if len(queries) == 0 && err == nil {
		err = fmt.Errorf("%s: no queries", p.QueryFile)
	}
	return ids, texts, queries, err
}

func eachLine(path string, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		if err := fn(n, sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// medianResult is the median of each figure over repetitions (the first
// repetition's rankings: they do not depend on the run).
func medianResult(rs []result) result {
	med := func(f func(r result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	out := rs[0]
	out.IndexSecs = med(func(r result) float64 { return r.IndexSecs })
	out.DocsPerSec = med(func(r result) float64 { return r.DocsPerSec })
	out.QPS = med(func(r result) float64 { return r.QPS })
	out.HeapBytes = uint64(med(func(r result) float64 { return float64(r.HeapBytes) }))
	out.MaxRSS = int64(med(func(r result) float64 { return float64(r.MaxRSS) }))
	return out
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
