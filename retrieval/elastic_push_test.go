package retrieval

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"
)

// fakePushES answers the requests of a push as Elasticsearch documents them,
// keeping the documents it was sent; its first _bulk rejects one item with
// 429 (a full write queue).
type fakePushES struct {
	*httptest.Server
	mu       sync.Mutex
	created  map[string]any // the create-index body
	docs     map[string]map[string]string
	bulks    [][]string // the _id of each _bulk request's items
	rejectID string     // rejected with 429 by the first _bulk
	meta     any        // the mapping's _meta after the last PUT _mapping
}

func newFakePushES(t *testing.T, rejectID string) *fakePushES {
	f := &fakePushES{docs: map[string]map[string]string{}, rejectID: rejectID}
	mux := http.NewServeMux()
	health := func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"cluster_name": "fake", "status": "green", "number_of_nodes": 3}`)
	}
	mux.HandleFunc("GET /_cluster/health", health)
	mux.HandleFunc("GET /_cluster/health/kb", health)
	mux.HandleFunc("GET /kb/_mapping", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.created == nil {
			http.Error(w, `{"error": {"type": "index_not_found_exception"}, "status": 404}`, http.StatusNotFound)
			return
		}
		m, _ := json.Marshal(map[string]any{"kb": map[string]any{"mappings": map[string]any{"_meta": f.meta}}})
		w.Write(m)
	})
	mux.HandleFunc("PUT /kb", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := json.NewDecoder(r.Body).Decode(&f.created); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.meta = f.created["mappings"].(map[string]any)["_meta"]
		fmt.Fprint(w, `{"acknowledged": true}`)
	})
	mux.HandleFunc("POST /_bulk", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		sc := bufio.NewScanner(r.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var ids, items []string
		for sc.Scan() {
			var head struct {
				Create struct {
					Index string `json:"_index"`
					ID    string `json:"_id"`
				} `json:"create"`
			}
			var doc map[string]string
			if json.Unmarshal(sc.Bytes(), &head) != nil || head.Create.Index != "kb" || !sc.Scan() || json.Unmarshal(sc.Bytes(), &doc) != nil {
				http.Error(w, "bad bulk body", 400)
				return
			}
			id := head.Create.ID
			ids = append(ids, id)
			switch {
			case id == f.rejectID && len(f.bulks) == 0:
				items = append(items, fmt.Sprintf(`{"create": {"_id": %q, "status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "write queue full"}}}`, id))
			case f.docs[id] != nil:
				items = append(items, fmt.Sprintf(`{"create": {"_id": %q, "status": 409, "error": {"type": "version_conflict_engine_exception"}}}`, id))
			default:
				f.docs[id] = doc
				items = append(items, fmt.Sprintf(`{"create": {"_id": %q, "status": 201}}`, id))
			}
		}
		f.bulks = append(f.bulks, ids)
		fmt.Fprintf(w, `{"errors": true, "items": [%s]}`, strings.Join(items, ","))
	})
	ok := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, `{"acknowledged": true}`)
	}
	mux.HandleFunc("PUT /kb/_settings", ok)
	mux.HandleFunc("POST /kb/_refresh", ok)
	mux.HandleFunc("PUT /kb/_mapping", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var m map[string]any
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.meta = m["_meta"]
		fmt.Fprint(w, `{"acknowledged": true}`)
	})
	mux.HandleFunc("GET /kb/_count", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, `{"count": %d}`, len(f.docs))
	})
	mux.HandleFunc("GET /kb/_stats/docs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Query().Get("level") != "shards" {
			http.Error(w, "want level=shards", 400)
			return
		}
		n := len(f.docs)
		fmt.Fprintf(w, `{"indices": {"kb": {"shards": {"0": [{"routing": {"primary": true, "node": "a"}, "docs": {"count": %d, "deleted": 0}},
			{"routing": {"primary": false, "node": "b"}, "docs": {"count": %d, "deleted": 0}}]}}}}`, n, n)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// A push creates the index with the config's BM25 and analyzer, sends the
// demo KB in batches, resends exactly the item the cluster rejected, and
// marks the index complete only at the end; pushed again, it does nothing.
func TestPushKBRetriesRejectedItems(t *testing.T) {
	kb, err := corpus.Load(t.Context(), "../datasets/demo/passages.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(kb.Passages))
	for i, p := range kb.Passages {
		ids[i] = p.ID
	}
	slices.Sort(ids)
	f := newFakePushES(t, ids[7])
	cfg := DefaultConfig()
	cfg.Method, cfg.K1, cfg.B, cfg.Analyzer = MethodElastic, 1.1, 0.6, analysis.LuceneEnglish
	cfg.Elasticsearch.Call, cfg.Elasticsearch.Index, cfg.Elasticsearch.IDField = pushTestService(f.URL), "kb", service.PushIDField
	opt := DefaultPushOptions()
	opt.BatchDocs = 500
	var progress []int
	opt.Progress = func(done, _ int) { progress = append(progress, done) }
	res, err := PushKB(t.Context(), cfg, "../datasets/demo/passages.jsonl", opt)
	if err != nil {
		t.Fatal(err)
	}
	if res.Docs != len(ids) || res.Retried != 1 || res.UpToDate || len(f.docs) != len(ids) {
		t.Fatalf("result %+v, %d documents held; want %d pushed, 1 resent", res, len(f.docs), len(ids))
	}
	if len(f.bulks) != 5 || !slices.Equal(f.bulks[1], []string{ids[7]}) || !slices.Equal(f.bulks[0], ids[:500]) {
		t.Fatalf("bulk requests of %v documents; want 500, then the rejected %s alone, then the rest", lens(f.bulks), ids[7])
	}
	if !slices.Equal(progress, []int{500, 1000, 1500, 1951}) {
		t.Errorf("progress %v", progress)
	}
	settings := f.created["settings"].(map[string]any)["index"].(map[string]any)
	sim := settings["similarity"].(map[string]any)[pushSimilarity].(map[string]any)
	if sim["type"] != "BM25" || sim["k1"] != 1.1 || sim["b"] != 0.6 || settings["number_of_shards"] != 1.0 || settings["number_of_replicas"] != 1.0 {
		t.Errorf("index settings %v", settings)
	}
	an := settings["analysis"].(map[string]any)["analyzer"].(map[string]any)[pushAnalyzer].(map[string]any)
	if an["tokenizer"] != "standard" || fmt.Sprint(an["filter"]) != "[himes_possessive lowercase himes_stop porter_stem]" {
		t.Errorf("analyzer %v", an)
	}
	p := kb.Passages[0]
	if d := f.docs[p.ID]; d[service.PushIDField] != p.ID || d["contents"] != corpus.FormatContents(Chunk{Title: p.Title, Text: p.Text}) {
		t.Errorf("document %s: %v", p.ID, d)
	}
	m := f.meta.(map[string]any)["himes"].(map[string]any)
	if m["complete"] != true || m["docs"] != float64(len(ids)) || m["kb_sha256"] != kb.Fingerprint {
		t.Errorf("marker after the push: %v", m)
	}
	n := len(f.bulks)
	res, err = PushKB(t.Context(), cfg, "../datasets/demo/passages.jsonl", opt)
	if err != nil || !res.UpToDate || len(f.bulks) != n {
		t.Errorf("second push: %+v, %v, %d more bulk requests; want nothing done", res, err, len(f.bulks)-n)
	}
	cfg.K1 = 0.9
	if _, err := PushKB(t.Context(), cfg, "../datasets/demo/passages.jsonl", opt); err == nil || !strings.Contains(err.Error(), "pass --replace") {
		t.Errorf("a push with another k1: got %v, want a refusal without --replace", err)
	}
}

func lens(b [][]string) []int {
	out := make([]int, len(b))
	for i, x := range b {
		out[i] = len(x)
	}
	return out
}

// pushTestService calls a test server with short backoffs.
func pushTestService(url string) service.Config {
	s := service.DefaultConfig()
	s.URL, s.Retries, s.BackoffBase, s.BackoffMax, s.Timeout = service.HostList{url}, 2, time.Millisecond, 2*time.Millisecond, 10*time.Second
	return s
}

func TestPushAnalysisAndIDs(t *testing.T) {
	for _, a := range []string{"", analysis.Plain, analysis.LuceneEnglish} {
		if _, err := pushAnalysis(a); err != nil {
			t.Errorf("%q: %v", a, err)
		}
	}
	if _, err := pushAnalysis(analysis.English); err == nil || !strings.Contains(err.Error(), "no exact OpenSearch/Elasticsearch equivalent") {
		t.Errorf("english: got %v, want a refusal", err)
	}
	if got := pushDocID("MARCO_1"); got != "MARCO_1" {
		t.Errorf("short id: %q", got)
	}
	long := "https://example.org/" + strings.Repeat("x", 600)
	if got := pushDocID(long); len(got) != len("sha256:")+64 || !strings.HasPrefix(got, "sha256:") || got == pushDocID(long+"y") {
		t.Errorf("long id: %q", got)
	}
	if got := pushDocID("sha256:abc"); got == "sha256:abc" {
		t.Errorf("an id shaped like a digest must be digested too, or it could collide with one")
	}
}
