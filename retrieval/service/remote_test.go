package service_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"
)

const demoKB = "../../datasets/demo/passages.jsonl"

// demoQueries are the demo conversations' questions: real queries whose
// rankings are long and full of ties-free scores.
func demoQueries(t *testing.T, n int) []string {
	t.Helper()
	raw, err := os.ReadFile("../../datasets/demo/train.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var qs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		var turn struct {
			Question string `json:"question"`
		}
		if err := json.Unmarshal([]byte(line), &turn); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, turn.Question)
		if len(qs) == n {
			break
		}
	}
	return qs
}

func openDemo(t *testing.T, cfg retrieval.Config) *retrieval.Pipeline {
	t.Helper()
	p, err := retrieval.Open(t.Context(), cfg, demoKB)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fastService is a call policy for tests: short backoff, few retries.
func fastService(urls ...string) service.Config {
	s := service.DefaultConfig()
	s.URL, s.Retries, s.BackoffBase, s.BackoffMax, s.Timeout = urls, 2, time.Millisecond, 2*time.Millisecond, 10*time.Second
	return s
}

// countingServer serves h and records the query count of every /retrieve call.
type countingServer struct {
	*httptest.Server
	mu      sync.Mutex
	batches []int
}

func newCountingServer(t *testing.T, h http.Handler) *countingServer {
	cs := &countingServer{}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req service.RetrieveRequest
		if json.Unmarshal(body, &req) == nil && r.URL.Path == "/retrieve" {
			cs.mu.Lock()
			cs.batches = append(cs.batches, len(req.Queries))
			cs.mu.Unlock()
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(cs.Close)
	return cs
}

// TestRemoteThroughServeEqualsInProcess serves the demo index with
// service.NewHandler and checks that a remote pipeline retrieves exactly what the
// in-process pipeline does (ids, order, scores, titles, texts, passage ids),
// one request per batch of max_batch distinct texts.
func TestRemoteThroughServeEqualsInProcess(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	srv := newCountingServer(t, service.NewHandler(local, 20))

	cfg := retrieval.DefaultConfig()
	cfg.Method, cfg.Remote.Call = retrieval.MethodRemote, fastService(srv.URL)
	cfg.Remote.Call.MaxBatch = 64
	remote, err := retrieval.Open(t.Context(), cfg, "") // no KB: nothing but the service
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	if remote.HasTermStats() || remote.IDF("president") != 0 {
		t.Errorf("a service without data.kb has no term statistics")
	}

	qs := demoQueries(t, 100)
	// 100 distinct texts, each asked twice, plus one with no indexed term.
	reqs := make([]retrieval.Request, 0, 201)
	for _, q := range qs {
		reqs = append(reqs, retrieval.Request{User: "u", Query: q}, retrieval.Request{User: "v", Rewrite: q, Query: "other"})
	}
	reqs = append(reqs, retrieval.Request{Rewrite: "zzqxj vvkwp", Query: "zzqxj vvkwp"})
	srv.batches = nil
	got, errs := remote.RetrieveBatch(t.Context(), reqs)
	if want := []int{64, 37}; !sameMultiset(srv.batches, want) {
		t.Errorf("batches of %v queries, want %v (101 distinct texts, max_batch 64)", srv.batches, want)
	}
	for i, r := range reqs {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		want, err := local.Retrieve(t.Context(), r.User, r.Rewrite, r.Query)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("request %d (%q): through the service\n got %+v\nwant %+v", i, r.Rewrite, got[i].Trace, want.Trace)
		}
	}
	if len(got[len(got)-1].Chunks) != 0 {
		t.Errorf("a text with no indexed term retrieves nothing in-process and remotely, got %d chunks", len(got[len(got)-1].Chunks))
	}
	// The candidates' full lists (not just the top k) are the same too.
	for _, q := range qs[:10] {
		a, err := remote.Search(t.Context(), q, 20)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := local.Search(t.Context(), q, 20)
		if len(a) != 20 || !reflect.DeepEqual(a, b) {
			t.Fatalf("search %q: remote %d results differ from in-process %d", q, len(a), len(b))
		}
	}
}

func sameMultiset(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	n := map[int]int{}
	for _, x := range a {
		n[x]++
	}
	for _, x := range b {
		n[x]--
	}
	for _, v := range n {
		if v != 0 {
			return false
		}
	}
	return true
}

// fakeRetrieve answers /retrieve with body(queries) and status.
func fakeRetrieve(t *testing.T, status int, body func(req service.RetrieveRequest) string) (*httptest.Server, *int) {
	calls := new(int)
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req service.RetrieveRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/retrieve" || r.Method != http.MethodPost {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		*calls++
		mu.Unlock()
		w.WriteHeader(status)
		io.WriteString(w, body(req))
	}))
	t.Cleanup(srv.Close)
	return srv, calls
}

// TestRemoteBadAnswers sends one query to services that break the protocol
// and checks each failure's kind: nothing malformed becomes chunks.
func TestRemoteBadAnswers(t *testing.T) {
	doc := func(id string, score float64) string {
		return fmt.Sprintf(`{"document": {"id": %q, "contents": "text of %s"}, "score": %v}`, id, id, score)
	}
	cases := []struct {
		name   string
		status int
		body   string
		kind   string // httpcall kind (a CallError) or service.ResultError kind
		result bool   // a service.ResultError, not a CallError
		calls  int
		want   string
	}{
		{"not json", 200, `{"result": [[`, httpcall.KindMalformed, false, 1, "retrieve response: unexpected end of JSON input"},
		{"no result", 200, `{"results": []}`, httpcall.KindMalformed, false, 1, `no "result"`},
		{"count", 200, `{"result": [[], []]}`, httpcall.KindMalformed, false, 1, "2 result lists for 1 queries"},
		{"no score", 200, `{"result": [[{"document": {"id": "a", "contents": "x"}}]]}`, httpcall.KindMalformed, false, 1, `no "score"`},
		{"no id", 200, `{"result": [[{"document": {"contents": "x"}, "score": 1}]]}`, service.ResultMalformed, true, 1, "no document id"},
		{"no text", 200, `{"result": [[{"document": {"id": "a"}, "score": 1}]]}`, service.ResultMalformed, true, 1, `"a" has no text`},
		{"duplicate", 200, `{"result": [[` + doc("a", 2) + `,` + doc("a", 1) + `]]}`, service.ResultMalformed, true, 1, "returned twice"},
		{"ascending", 200, `{"result": [[` + doc("a", 1) + `,` + doc("b", 2) + `]]}`, service.ResultMalformed, true, 1, "not in descending order"},
		{"too many", 200, `{"result": [[` + doc("a", 3) + `,` + doc("b", 2) + `,` + doc("c", 1) + `]]}`, service.ResultMalformed, true, 1, "3 results for topk 2"},
		{"rejected", 422, `{"detail": "bad"}`, httpcall.KindRejected, false, 1, "422"},
		{"server error", 500, `{"error": "index exploded"}`, httpcall.KindUnavailable, false, 3, "index exploded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, calls := fakeRetrieve(t, c.status, func(service.RetrieveRequest) string { return c.body })
			r, err := service.NewRemote(fastService(srv.URL), 1)
			if err != nil {
				t.Fatal(err)
			}
			lists, errs := service.Search(t.Context(), r, []string{"q"}, 2, nil)
			err = errs[0]
			if err == nil || lists[0] != nil {
				t.Fatalf("want a failure, got %v (%d results)", err, len(lists[0]))
			}
			var ce *httpcall.CallError
			var re *service.ResultError
			switch {
			case c.result && errors.As(err, &re):
				if re.Kind != c.kind {
					t.Errorf("kind %q, want %q (%v)", re.Kind, c.kind, err)
				}
			case !c.result && errors.As(err, &ce):
				if ce.Kind != c.kind {
					t.Errorf("kind %q, want %q (%v)", ce.Kind, c.kind, err)
				}
			default:
				t.Errorf("error %T %v: want a %s failure of kind %s", err, err, map[bool]string{true: "result", false: "call"}[c.result], c.kind)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q lacks %q", err, c.want)
			}
			if *calls != c.calls {
				t.Errorf("%d calls, want %d (retries only on 5xx)", *calls, c.calls)
			}
		})
	}
}

// TestRemoteSearchR1Documents accepts what Search-R1's servers send: a
// wiki-18 document (numeric id, `"Title"\ntext` contents), fewer results
// than asked, and an empty list; with a knowledge base configured, an id it
// does not hold fails that query only, as unknown_id.
func TestRemoteSearchR1Documents(t *testing.T) {
	srv, _ := fakeRetrieve(t, 200, func(req service.RetrieveRequest) string {
		var lists []string
		for _, q := range req.Queries {
			switch q {
			case "wiki":
				lists = append(lists, `[{"document": {"id": 17, "contents": "\"Aaron\"\nAaron is a prophet."}, "score": 9.5},
					{"document": {"id": "18", "contents": "no title here"}, "score": 9.5}]`)
			case "none":
				lists = append(lists, `[]`)
			case "stranger":
				lists = append(lists, `[{"document": {"id": "not-in-kb", "contents": "x"}, "score": 1}]`)
			default:
				lists = append(lists, `[{"document": {"id": "MARCO_0#0", "contents": "x"}, "score": 2},
					{"document": {"id": "MARCO_1", "contents": "y"}, "score": 1}]`)
			}
		}
		return `{"result": [` + strings.Join(lists, ",") + `]}`
	})
	r, err := service.NewRemote(fastService(srv.URL), 1)
	if err != nil {
		t.Fatal(err)
	}
	lists, errs := service.Search(t.Context(), r, []string{"wiki", "none"}, 5, nil)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	want := []corpus.Ranked{
		{Chunk: corpus.Chunk{ID: "17", PassageID: "17", Title: "Aaron", Text: "Aaron is a prophet."}, Score: 9.5},
		{Chunk: corpus.Chunk{ID: "18", PassageID: "18", Text: "no title here"}, Score: 9.5},
	}
	if !reflect.DeepEqual(lists[0], want) || len(lists[1]) != 0 {
		t.Errorf("got %+v and %d results, want %+v and none", lists[0], len(lists[1]), want)
	}

	known := func(id string) bool { return id == "MARCO_0#0" || id == "MARCO_1" } // a chunk id and a passage id
	_, errs = service.Search(t.Context(), r, []string{"stranger", "ok"}, 5, known)
	var re *service.ResultError
	if !errors.As(errs[0], &re) || re.Kind != service.ResultUnknownID || !strings.Contains(errs[0].Error(), `"not-in-kb"`) {
		t.Errorf("stranger: got %v, want unknown_id naming the id", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("ok: a known chunk id and a known passage id are accepted, got %v", errs[1])
	}
}

// TestOpenProbesEveryHost refuses a service with an unreachable host or no
// /retrieve before any work starts.
func TestOpenProbesEveryHost(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	good := httptest.NewServer(service.NewHandler(local, 20))
	defer good.Close()
	none := httptest.NewServer(http.NotFoundHandler())
	defer none.Close()
	for _, c := range []struct{ host, want string }{
		{none.URL, "not found on host " + none.URL},
		{"http://127.0.0.1:1", "unavailable"},
	} {
		cfg := retrieval.DefaultConfig()
		cfg.Method, cfg.Remote.Call = retrieval.MethodRemote, fastService(good.URL, c.host)
		_, err := retrieval.Open(t.Context(), cfg, "")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "retrieval service "+c.host) {
			t.Errorf("host %s: got %v, want an error naming the host and %q", c.host, err, c.want)
		}
	}
}

// TestServeRejectsBadRequests: the handler's own input checks.
func TestServeRejectsBadRequests(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	srv := httptest.NewServer(service.NewHandler(local, 3))
	defer srv.Close()
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL+"/retrieve", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"topk": 3}`, 400, `\"queries\" is required`},
		{`{"queries": ["a"], "topk": -1}`, 400, `\"topk\" must be in`},
		{`{"queries": ["a"]} {"x": 1}`, 400, "trailing data"},
		{`{"queries": "a"}`, 400, "cannot unmarshal"},
		{`{"queries": [` + strings.Repeat(`"a",`, service.ServeMaxQueries) + `"a"]}`, 413, "at most 4096"},
	} {
		if st, body := post(c.body); st != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%.40s: %d %s, want %d with %q", c.body, st, body, c.status, c.want)
		}
	}
	// Without topk the server's default applies; without return_scores the
	// documents come bare, as Search-R1 sends them.
	st, body := post(`{"queries": ["president of the united states"]}`)
	var bare struct {
		Result [][]service.Document `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &bare); st != 200 || err != nil || len(bare.Result) != 1 || len(bare.Result[0]) != 3 || bare.Result[0][0].ID == "" {
		t.Errorf("default topk 3, bare documents: %d %.200s", st, body)
	}
}

// TestServiceConfig: url takes one string or a list, and a service method
// without hosts or with a bad URL is refused naming the key.
func TestServiceConfig(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want service.HostList
	}{
		{`url: http://a:8000`, service.HostList{"http://a:8000"}},
		{`url: [http://a:8000, "https://b/prefix"]`, service.HostList{"http://a:8000", "https://b/prefix"}},
	} {
		var s service.Config
		if err := yaml.Unmarshal([]byte(c.yaml), &s); err != nil || !reflect.DeepEqual(s.URL, c.want) {
			t.Errorf("%s: got %v (%v), want %v", c.yaml, s.URL, err, c.want)
		}
	}
	for _, c := range []struct {
		set  func(*retrieval.Config)
		want string
	}{
		{func(c *retrieval.Config) { c.Method = retrieval.MethodRemote }, "remote.url: required"},
		{func(c *retrieval.Config) {
			c.Method, c.Remote.Call.URL = retrieval.MethodRemote, service.HostList{"ftp://x"}
		}, "remote.url: host 1"},
		{func(c *retrieval.Config) {
			c.Method, c.Remote.Call.URL, c.Remote.Call.MaxBatch = retrieval.MethodRemote, service.HostList{"http://x"}, 0
		}, "remote.max_batch"},
		{func(c *retrieval.Config) {
			c.Method, c.Elasticsearch.Call.URL = retrieval.MethodElastic, service.HostList{"http://x"}
		}, "elasticsearch.index"},
		{func(c *retrieval.Config) { c.Method = "solr" }, "must be bm25, dense, hybrid, remote or elasticsearch"},
	} {
		cfg := retrieval.DefaultConfig()
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}
