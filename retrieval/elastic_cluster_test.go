package retrieval

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/searchtest"
	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"
)

// clusterConfig is a config for the elasticsearch backend on urls: the
// shared KB's BM25 parameters (Pyserini's k1 0.9, b 0.4) and Lucene scoring
// for the embedded side, ties ordered by the pushed id field.
func clusterConfig(urls []string, index, analyzer string) Config {
	cfg := DefaultConfig()
	cfg.Method, cfg.Analyzer, cfg.Scoring = MethodElastic, analyzer, ScoringLucene
	cfg.Elasticsearch.Call.URL = urls
	// Parity, not speed: one batch per node at a time, and time enough for
	// a cluster on a loaded 2-core machine (seconds per batch).
	cfg.Elasticsearch.Call.MaxPerHost, cfg.Elasticsearch.Call.Timeout = 1, 5*time.Minute
	cfg.Elasticsearch.Index, cfg.Elasticsearch.IDField = index, service.PushIDField
	return cfg
}

// pushShared pushes the shared KB into index (once: a later push of the
// same KB and settings leaves the index as it is) and returns a probed
// client of it.
func pushShared(t *testing.T, cfg Config, opt PushOptions) *service.Elastic {
	t.Helper()
	kb := filepath.Join(sharedtest.SharedDir(t), "kb", "passages.jsonl")
	opt.Replace = true
	res, err := PushKB(t.Context(), cfg, kb, opt)
	if err != nil {
		t.Fatalf("push %s: %v", cfg.Elasticsearch.Index, err)
	}
	if res.Docs != 4040 {
		t.Fatalf("pushed %d passages, want the shared KB's 4040", res.Docs)
	}
	e, err := service.NewElastic(cfg.Elasticsearch, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if err := e.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	if e.Similarity.K1 != cfg.K1 || e.Similarity.B != cfg.B || e.Similarity.Docs != 4040 {
		t.Fatalf("the pushed index ranks with %+v, want BM25 k1 %v b %v over 4040 documents", e.Similarity, cfg.K1, cfg.B)
	}
	return e
}

// judgedQrels reads the qrels of the 825 judged turns (CAsT 2020–2022 and
// MTRAG's human-evaluated subset) by "conv_turn" id: a passage's grade is
// its relevance (1 when not given), the highest one when listed twice.
func judgedQrels(t *testing.T) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, name := range []string{"cast2020", "cast2021", "cast2022", "mtrag_human_eval_subset"} {
		f, err := os.Open(sharedtest.Shared(t, "conversations/"+name+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for line := 1; sc.Scan(); line++ {
			var r struct {
				ConvID   string          `json:"conv_id"`
				Turn     json.RawMessage `json:"turn"` // a number, or a string ("1-1") in CAsT 2022
				Passages []struct {
					ID        string `json:"id"`
					Relevance *int   `json:"relevance"`
				} `json:"passages"`
			}
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s line %d: %v", name, line, err)
			}
			q := map[string]int{}
			for _, p := range r.Passages {
				g := 1
				if p.Relevance != nil {
					g = *p.Relevance
				}
				q[p.ID] = max(q[p.ID], g)
			}
			out[r.ConvID+"_"+strings.Trim(string(r.Turn), `"`)] = q
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// parityStats compares the cluster's top 10 with the embedded index's.
type parityStats struct {
	queries, inOrder, asSets, scoresEqual int
	maxRelDev                             float64 // largest |cluster − (1+k1)·embedded| / cluster score
	// mean Recall@10 and NDCG@3 of each side, by query field (question, rewrite)
	recall, ndcg map[string][2]float64
	n            map[string]int
	diffs        []string
}

func (s parityStats) String() string {
	pct := func(n int) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(s.queries)) }
	out := fmt.Sprintf("%d queries: %s identical in order, %s as sets, %s with every score (1+k1)·embedded to 1e-6 (largest deviation %.2g)",
		s.queries, pct(s.inOrder), pct(s.asSets), pct(s.scoresEqual), s.maxRelDev)
	for _, f := range []string{"question", "rewrite"} {
		n := float64(s.n[f])
		out += fmt.Sprintf("; %s R@10 %.4f vs %.4f, NDCG@3 %.4f vs %.4f", f,
			s.recall[f][0]/n, s.recall[f][1]/n, s.ndcg[f][0]/n, s.ndcg[f][1]/n)
	}
	return out
}

// compareCluster runs every reference query through the cluster (in
// _msearch batches, as a training step does) and the embedded index.
func compareCluster(t *testing.T, e *service.Elastic, ix *Index, refs []parityRecord, qrels map[string]map[string]int) parityStats {
	t.Helper()
	texts := make([]string, len(refs))
	for i, r := range refs {
		texts[i] = r.Text
	}
	lists, errs := service.Search(t.Context(), e, texts, 10, nil)
	s := parityStats{recall: map[string][2]float64{}, ndcg: map[string][2]float64{}, n: map[string]int{}}
	for i, r := range refs {
		if errs[i] != nil {
			t.Fatalf("%s %s %q: %v", r.QID, r.Field, r.Text, errs[i])
		}
		q, ok := qrels[r.QID]
		if !ok || len(q) == 0 {
			t.Fatalf("%s: no judged passages", r.QID)
		}
		var got, want []Scored
		for _, h := range lists[i] {
			got = append(got, Scored{ID: h.PassageID, Score: h.Score})
		}
		for _, h := range ix.SearchText(r.Text, 10) {
			want = append(want, Scored{ID: corpus.ChunkPassageID(ix.ID(h.Doc)), Score: h.Score})
		}
		s.queries++
		ids := func(l []Scored) []string {
			out := make([]string, len(l))
			for j, x := range l {
				out[j] = x.ID
			}
			return out
		}
		gi, wi := ids(got), ids(want)
		if slices.Equal(gi, wi) {
			s.inOrder++
			// OpenSearch and Elasticsearch rank with LegacyBM25Similarity: Lucene's
			// BM25 with every weight multiplied by (1+k1), the factor Lucene 8
			// dropped. The order is the same; each score is (1+k1) times the
			// embedded one up to float32 rounding of the products.
			equal := true
			for j := range got {
				dev := math.Abs(got[j].Score-(1+e.Similarity.K1)*want[j].Score) / got[j].Score
				s.maxRelDev = max(s.maxRelDev, dev)
				equal = equal && dev <= 1e-6
			}
			if equal {
				s.scoresEqual++
			}
		} else if len(s.diffs) < 5 {
			s.diffs = append(s.diffs, fmt.Sprintf("%s %s %q:\n  cluster  %v\n  embedded %v", r.QID, r.Field, r.Text, got, want))
		}
		slices.Sort(gi)
		slices.Sort(wi)
		if slices.Equal(gi, wi) {
			s.asSets++
		}
		rc, nd := s.recall[r.Field], s.ndcg[r.Field]
		rc[0] += recallAt(got, q, 10)
		rc[1] += recallAt(want, q, 10)
		nd[0] += ndcgAt(got, q, 3)
		nd[1] += ndcgAt(want, q, 3)
		s.recall[r.Field], s.ndcg[r.Field] = rc, nd
		s.n[r.Field]++
	}
	return s
}

// The cluster's BM25 over the pushed shared KB ranks the 825 judged turns'
// questions and human rewrites exactly as the embedded index with Lucene
// scoring: the same top 10 in the same order, each score (1+k1) times the
// embedded one (the cluster's LegacyBM25Similarity), hence the same
// Recall@10 and NDCG@3, for both analyzers the push
// reproduces. One shard, one replica: the index `himes index push` makes
// by default.
func TestOpenSearchParitySharedKB(t *testing.T) {
	urls := searchtest.URLs(t)
	qrels := judgedQrels(t)
	for _, tc := range []struct{ analyzer, ref string }{
		{analysis.LuceneEnglish, "lucene-english"},
		{analysis.Plain, "plain"},
	} {
		refs := readParity(t, tc.ref)
		if len(refs) != 2*825 {
			t.Fatalf("%d reference queries, want 1650", len(refs))
		}
		cfg := clusterConfig(urls, "himes-test-parity-"+tc.ref, tc.analyzer)
		e := pushShared(t, cfg, DefaultPushOptions())
		ix := sharedIndex(t, tc.analyzer, ScoringLucene)
		s := compareCluster(t, e, ix, refs, qrels)
		t.Logf("analyzer %s, one shard: %v", tc.analyzer, s)
		for _, d := range s.diffs {
			t.Log(d)
		}
		if s.scoresEqual != s.queries {
			t.Errorf("analyzer %s: the cluster differs from the embedded index on %d of %d queries", tc.analyzer, s.queries-s.scoresEqual, s.queries)
		}
		for f, n := range s.n {
			for name, m := range map[string][2]float64{"R@10": s.recall[f], "NDCG@3": s.ndcg[f]} {
				if math.Round(1000*m[0]/float64(n)) != math.Round(1000*m[1]/float64(n)) {
					t.Errorf("analyzer %s, %s %s: cluster %.4f, embedded %.4f", tc.analyzer, f, name, m[0]/float64(n), m[1]/float64(n))
				}
			}
		}
	}
}

// Several shards (opt-in: HIMES_OPENSEARCH_SHARDS=N, e.g. 3): each shard
// scores with its own statistics under query_then_fetch, which this
// measures; dfs_query_then_fetch gathers them over every shard first and
// must rank exactly as the embedded index again.
func TestOpenSearchShardsParity(t *testing.T) {
	v := os.Getenv("HIMES_OPENSEARCH_SHARDS")
	if v == "" {
		t.Skip("SKIP: opt-in measurement: HIMES_OPENSEARCH_SHARDS=3 go test -run TestOpenSearchShardsParity ./retrieval")
	}
	shards, err := strconv.Atoi(v)
	if err != nil || shards < 2 {
		t.Fatalf("HIMES_OPENSEARCH_SHARDS=%q: want a shard count ≥ 2", v)
	}
	urls := searchtest.URLs(t)
	qrels := judgedQrels(t)
	refs := readParity(t, "lucene-english")
	cfg := clusterConfig(urls, "himes-test-parity-shards-"+v, analysis.LuceneEnglish)
	opt := DefaultPushOptions()
	opt.Shards = shards
	e := pushShared(t, cfg, opt)
	ix := sharedIndex(t, analysis.LuceneEnglish, ScoringLucene)
	qtf := compareCluster(t, e, ix, refs, qrels)
	t.Logf("%d shards, query_then_fetch: %v", shards, qtf)
	for _, d := range qtf.diffs[:min(2, len(qtf.diffs))] {
		t.Log(d)
	}
	cfg.Elasticsearch.SearchType = "dfs_query_then_fetch"
	dfs, err := service.NewElastic(cfg.Elasticsearch, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dfs.Close()
	if err := dfs.Probe(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := compareCluster(t, dfs, ix, refs, qrels)
	t.Logf("%d shards, dfs_query_then_fetch: %v", shards, s)
	if s.scoresEqual != s.queries {
		t.Errorf("dfs_query_then_fetch over %d shards differs from the embedded index on %d of %d queries; first: %s",
			shards, s.queries-s.scoresEqual, s.queries, strings.Join(s.diffs[:min(1, len(s.diffs))], ""))
	}
}

// recallAt and ndcgAt score a ranking already in rank order with trec_eval's
// recall and ndcg_cut. The harness's own are in evaluate/ir, which imports
// this package, so its tests cannot import it;
// the cluster and the embedded index are both scored with these.
func recallAt(run []Scored, qrels map[string]int, k int) float64 {
	rel, hit := 0, 0
	for _, g := range qrels {
		if g > 0 {
			rel++
		}
	}
	for i, s := range run {
		if i < k && qrels[s.ID] > 0 {
			hit++
		}
	}
	if rel == 0 {
		return 0
	}
	return float64(hit) / float64(rel)
}

func ndcgAt(run []Scored, qrels map[string]int, k int) float64 {
	dcg, ideal := 0.0, 0.0
	for i, s := range run {
		if g := qrels[s.ID]; i < k && g > 0 {
			dcg += float64(g) / math.Log2(float64(i+2))
		}
	}
	var gains []int
	for _, g := range qrels {
		if g > 0 {
			gains = append(gains, g)
		}
	}
	slices.Sort(gains)
	slices.Reverse(gains)
	for i, g := range gains {
		if i < k {
			ideal += float64(g) / math.Log2(float64(i+2))
		}
	}
	if ideal == 0 {
		return 0
	}
	return dcg / ideal
}
