package retrieval

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/searchtest"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval/service"
)

// stepQueries is the number of rewrites one GRPO step retrieves for: the
// default 16 prompts × 8 samples.
const stepQueries = 128

// BenchmarkStepRetrieval retrieves a training step's rewrites (128 distinct
// queries from the 825 judged turns' questions and rewrites, the next 128
// each iteration) over the shared KB, side by side:
//
//	embedded  the pipeline's own index (lucene-english, Lucene scoring)
//	serve     the same index behind `himes retrieval serve`'s handler on
//	          loopback, searched with method remote (/retrieve, 64 per call)
//	cluster   the pushed index on the three-node OpenSearch cluster CI
//	          starts, searched with method elasticsearch (_msearch, 64 per call)
//	          (ties ordered by the id field: a sort on score, then id)
//
// Each reports queries/s; the three return the same top 10 (the parity
// tests check that). Run:
//
//	go test -run '^$' -bench BenchmarkStepRetrieval -benchtime 20x ./retrieval
func BenchmarkStepRetrieval(b *testing.B) {
	kb := filepath.Join(sharedtest.SharedDir(b), "kb", "passages.jsonl")
	refs := readParity(b, "lucene-english")
	reqs := make([]Request, len(refs))
	for i, r := range refs {
		reqs[i] = Request{Query: r.Text}
	}
	base := DefaultConfig()
	base.Analyzer, base.Scoring, base.TopK, base.Candidates = analysis.LuceneEnglish, ScoringLucene, 10, 10
	embedded, err := Open(b.Context(), base, kb)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(service.NewHandler(embedded, 10))
	defer srv.Close()
	remote := base
	remote.Method = MethodRemote
	remote.Remote.Call.URL = service.HostList{srv.URL}

	step := func(b *testing.B, p *Pipeline) {
		next := 0
		b.ResetTimer()
		for b.Loop() {
			batch := make([]Request, stepQueries)
			for j := range batch {
				batch[j] = reqs[next%len(reqs)]
				next++
			}
			_, errs := p.RetrieveBatch(b.Context(), batch)
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*stepQueries)/b.Elapsed().Seconds(), "queries/s")
	}
	b.Run("embedded", func(b *testing.B) { step(b, embedded) })
	b.Run("serve", func(b *testing.B) {
		p, err := Open(b.Context(), remote, kb)
		if err != nil {
			b.Fatal(err)
		}
		step(b, p)
	})
	b.Run("cluster", func(b *testing.B) {
		urls := searchtest.URLs(b)
		cfg := clusterConfig(urls, "himes-test-parity-lucene-english", analysis.LuceneEnglish)
		cfg.TopK, cfg.Candidates = 10, 10
		cfg.Elasticsearch.Call.MaxPerHost = 4
		if _, err := PushKB(b.Context(), cfg, kb, DefaultPushOptions()); err != nil {
			b.Fatal(err)
		}
		p, err := Open(b.Context(), cfg, kb)
		if err != nil {
			b.Fatal(err)
		}
		step(b, p)
	})
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		b.Logf("load average: %s", raw)
	}
}
