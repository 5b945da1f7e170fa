package service_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/service"
)

// fakeES answers like Elasticsearch 8 does (documented response shapes:
// GET <index>/_settings, _mapping, _count; POST _msearch with NDJSON in and
// {"responses": [{"hits": {"hits": [{"_id", "_score", "_source"}]}}]} out),
// ranking with the embedded BM25 index of the same documents, which stores
// their text in "contents" and their title in "title".
type fakeES struct {
	*httptest.Server
	p          *retrieval.Pipeline
	settings   string // the similarity settings object of the index
	mapping    string // the contents field's mapping
	count      int
	mu         sync.Mutex
	batches    []int
	headers    []string
	failQuery  string // a query answered with a per-item error
	failStatus int
	health     string // the index's _cluster/health status
	// partialQuery is answered with one of its two shards failed, partialFor
	// times (-1: always).
	partialQuery string
	partialFor   int
}

func newFakeES(t *testing.T, p *retrieval.Pipeline) *fakeES {
	f := &fakeES{p: p, settings: `{}`, mapping: `{"type": "text"}`, count: 1951, health: "green"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_cluster/health/passages", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"cluster_name": "fake", "status": %q, "number_of_nodes": 3, "number_of_data_nodes": 3, "active_primary_shards": 1}`, f.health)
	})
	mux.HandleFunc("GET /passages/_settings", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"passages-v1": {"settings": {"index": {"number_of_shards": "1", "similarity": %s}}}}`, f.settings)
	})
	mux.HandleFunc("GET /passages/_mapping", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"passages-v1": {"mappings": {"properties": {"contents": %s, "year": {"type": "long"}}}}}`, f.mapping)
	})
	mux.HandleFunc("GET /passages/_count", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"count": %d, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}`, f.count)
	})
	mux.HandleFunc("POST /_msearch", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.headers = append(f.headers, r.Header.Get("Content-Type"))
		f.mu.Unlock()
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var items []string
		for sc.Scan() {
			var head struct {
				Index string `json:"index"`
			}
			if json.Unmarshal(sc.Bytes(), &head) != nil || head.Index != "passages" || !sc.Scan() {
				http.Error(w, `{"error": {"type": "parse_exception", "reason": "bad header"}, "status": 400}`, 400)
				return
			}
			var body struct {
				Query struct {
					Match map[string]struct {
						Query string `json:"query"`
					} `json:"match"`
				} `json:"query"`
				Size   int      `json:"size"`
				Source []string `json:"_source"`
			}
			if err := json.Unmarshal(sc.Bytes(), &body); err != nil || len(body.Query.Match) != 1 || body.Size < 1 {
				http.Error(w, "bad body "+sc.Text(), 400)
				return
			}
			m, ok := body.Query.Match["contents"]
			if !ok {
				http.Error(w, "match on another field", 400)
				return
			}
			if m.Query == f.failQuery {
				items = append(items, fmt.Sprintf(`{"error": {"root_cause": [], "type": "es_rejected_execution_exception", "reason": "queue full"}, "status": %d}`, f.failStatus))
				continue
			}
			shards := `{"total": 2, "successful": 2, "skipped": 0, "failed": 0}`
			f.mu.Lock()
			if m.Query == f.partialQuery && f.partialFor != 0 {
				f.partialFor--
				shards = `{"total": 2, "successful": 1, "skipped": 0, "failed": 1, "failures": [{"shard": 1, "index": "passages-v1", "reason": {"type": "node_not_connected_exception", "reason": "node left"}}]}`
			}
			f.mu.Unlock()
			hits, _ := f.p.Search(r.Context(), m.Query, body.Size)
			hs := make([]string, len(hits))
			for i, h := range hits {
				src, _ := json.Marshal(map[string]string{"contents": h.Text, "title": h.Title})
				hs[i] = fmt.Sprintf(`{"_index": "passages-v1", "_id": %q, "_score": %v, "_source": %s}`, h.ID, h.Score, src)
			}
			items = append(items, `{"took": 1, "timed_out": false, "_shards": `+shards+`, "hits": {"max_score": null, "hits": [`+strings.Join(hs, ",")+`]}, "status": 200}`)
		}
		f.mu.Lock()
		f.batches = append(f.batches, len(items))
		f.mu.Unlock()
		fmt.Fprintf(w, `{"took": 3, "responses": [%s]}`, strings.Join(items, ","))
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func elasticConfig(url string) retrieval.Config {
	cfg := retrieval.DefaultConfig()
	cfg.Method = retrieval.MethodElastic
	cfg.Elasticsearch.Call, cfg.Elasticsearch.Index, cfg.Elasticsearch.TitleField = fastService(url), "passages", "title"
	return cfg
}

// TestElasticEqualsIndexRanking: an Elasticsearch-backed pipeline returns
// what the index ranks (ids, order, scores), titles split from contents, a
// step's texts in _msearch batches of max_batch.
func TestElasticEqualsIndexRanking(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	es := newFakeES(t, local)
	cfg := elasticConfig(es.URL)
	cfg.Elasticsearch.Call.MaxBatch = 30
	p, err := retrieval.Open(t.Context(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	es.batches = nil
	qs := demoQueries(t, 70)
	reqs := make([]retrieval.Request, len(qs))
	for i, q := range qs {
		reqs[i] = retrieval.Request{Query: q}
	}
	got, errs := p.RetrieveBatch(t.Context(), reqs)
	if !sameMultiset(es.batches, []int{30, 30, 10}) {
		t.Errorf("_msearch batches %v, want 30, 30, 10", es.batches)
	}
	for _, h := range es.headers {
		if h != "application/x-ndjson" {
			t.Errorf("_msearch sent with Content-Type %q", h)
		}
	}
	for i, r := range reqs {
		if errs[i] != nil {
			t.Fatalf("query %d: %v", i, errs[i])
		}
		want, _ := local.Retrieve(t.Context(), "", "", r.Query)
		for j := range want.Chunks {
			// The index's documents are what it returns: their _id is the
			// passage id (here the demo's chunk ids).
			want.Chunks[j].PassageID = want.Chunks[j].ID
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("query %q:\n got %+v\nwant %+v", r.Query, got[i].Trace, want.Trace)
		}
	}
	if s := p.Service().(*service.Elastic).Similarity; s != (service.ElasticSimilarity{Name: "default", Type: "BM25", K1: 1.2, B: 0.75, Docs: 1951, Index: "passages"}) {
		t.Errorf("no similarity settings: got %+v, want Elasticsearch's BM25 defaults k1 1.2, b 0.75", s)
	}
}

// TestElasticSimilarityFromSettings reads k1 and b the way Elasticsearch
// applies them: the field's named similarity, else the index default.
func TestElasticSimilarityFromSettings(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	for _, c := range []struct {
		settings, mapping string
		want              service.ElasticSimilarity
	}{
		{`{"default": {"type": "BM25", "k1": "0.9", "b": "0.4"}}`, `{"type": "text"}`,
			service.ElasticSimilarity{Name: "default", Type: "BM25", K1: 0.9, B: 0.4}},
		{`{"default": {"type": "BM25", "k1": "0.9"}, "pyserini": {"type": "BM25", "k1": 0.82, "b": 0.68}}`, `{"type": "text", "similarity": "pyserini"}`,
			service.ElasticSimilarity{Name: "pyserini", Type: "BM25", K1: 0.82, B: 0.68}},
		{`{"default": {"type": "BM25", "k1": "2"}}`, `{"type": "text"}`,
			service.ElasticSimilarity{Name: "default", Type: "BM25", K1: 2, B: 0.75}},
		{`{"lm": {"type": "LMDirichlet", "mu": "1000"}}`, `{"type": "text", "similarity": "lm"}`,
			service.ElasticSimilarity{Name: "lm", Type: "LMDirichlet", K1: 1.2, B: 0.75}},
	} {
		es := newFakeES(t, local)
		es.settings, es.mapping = c.settings, c.mapping
		e, err := service.NewElastic(elasticConfig(es.URL).Elasticsearch, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Probe(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.want.Docs, c.want.Index = 1951, "passages"
		if e.Similarity != c.want {
			t.Errorf("settings %s, mapping %s:\n got %+v\nwant %+v", c.settings, c.mapping, e.Similarity, c.want)
		}
	}
}

// TestElasticRefusesBadIndexes at retrieval.Open, and fails single queries whose
// _msearch item is an error, with the kind its status says.
func TestElasticRefusesBadIndexes(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	for _, c := range []struct {
		name    string
		setup   func(*fakeES, *retrieval.Config)
		wantErr string
	}{
		{"empty", func(f *fakeES, _ *retrieval.Config) { f.count = 0 }, "holds no documents"},
		{"keyword", func(f *fakeES, _ *retrieval.Config) { f.mapping = `{"type": "keyword"}` }, `has type "keyword"`},
		{"field", func(_ *fakeES, c *retrieval.Config) { c.Elasticsearch.TextField = "body" }, `no field "body"`},
		{"similarity", func(f *fakeES, _ *retrieval.Config) { f.mapping = `{"type": "text", "similarity": "mine"}` }, `similarity "mine" is not defined`},
		{"index", func(_ *fakeES, c *retrieval.Config) { c.Elasticsearch.Index = "other" }, "not found on host"},
	} {
		es := newFakeES(t, local)
		cfg := elasticConfig(es.URL)
		c.setup(es, &cfg)
		if _, err := retrieval.Open(t.Context(), cfg, ""); err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.wantErr)
		}
	}

	es := newFakeES(t, local)
	p, err := retrieval.Open(t.Context(), elasticConfig(es.URL), "")
	if err != nil {
		t.Fatal(err)
	}
	for status, kind := range map[int]string{429: "unavailable", 400: "rejected"} {
		es.failQuery, es.failStatus = "who won", status
		_, errs := p.RetrieveBatch(t.Context(), []retrieval.Request{{Query: "who won"}, {Query: "president of the united states"}})
		var re *service.ResultError
		if !errors.As(errs[0], &re) || re.Kind != kind || !strings.Contains(errs[0].Error(), "queue full") {
			t.Errorf("status %d: got %v, want kind %s with the reason", status, errs[0], kind)
		}
		if errs[1] != nil {
			t.Errorf("status %d: the batch's other query fails too: %v", status, errs[1])
		}
	}
}
