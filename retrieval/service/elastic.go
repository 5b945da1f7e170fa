package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// Elastic searches an Elasticsearch or OpenSearch index: one match query on
// the text field per rewrite, a step's rewrites batched into _msearch calls.
// Ranking is the index's own similarity (BM25 with the k1 and b of its
// settings), read by Probe.
type Elastic struct {
	call *httpcall.Caller
	cfg  ElasticConfig
	hdr  http.Header
	name string
	// Similarity is how the index ranks the text field (set by Probe).
	Similarity ElasticSimilarity
	// itemBackoff spaces the retries of failed _msearch items.
	itemBackoff *httpcall.Backoff
}

// ElasticSimilarity is the text field's similarity as the index settings
// define it, and the index's document count.
type ElasticSimilarity struct {
	Name  string  `json:"name"` // the similarity the field uses ("default" unless the mapping names one)
	Type  string  `json:"type"` // "BM25" for BM25
	K1    float64 `json:"k1"`
	B     float64 `json:"b"`
	Docs  int64   `json:"docs"`
	Index string  `json:"index"`
}

// Elasticsearch's BM25 defaults, used when the settings do not set them.
const (
	esDefaultK1 = 1.2
	esDefaultB  = 0.75
)

// NewElastic returns a client of cfg's index. seed drives only the retry jitter.
func NewElastic(cfg ElasticConfig, seed uint64) (*Elastic, error) {
	pool, err := servicePool(cfg.Call)
	if err != nil {
		return nil, err
	}
	e := &Elastic{call: httpcall.NewCaller("elasticsearch", pool, cfg.Call.policy(), seed), cfg: cfg,
		hdr: http.Header{}, name: "elasticsearch " + cfg.Index, itemBackoff: httpcall.NewBackoff(cfg.Call.BackoffBase, cfg.Call.BackoffMax, seed+1)}
	if cfg.APIKeyEnv != "" {
		key := os.Getenv(cfg.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("elasticsearch: environment variable %s is not set", cfg.APIKeyEnv)
		}
		e.hdr.Set("Authorization", "ApiKey "+key)
	}
	return e, nil
}

func (e *Elastic) Name() string  { return e.name }
func (e *Elastic) MaxBatch() int { return e.cfg.Call.MaxBatch }
func (e *Elastic) Close()        { e.call.Close() }

// get runs one GET on pin (every host when probing) or the pool.
func (e *Elastic) get(ctx context.Context, pin *httpcall.Host, path string, out any) error {
	return e.call.Call(ctx, pin, "index "+e.cfg.Index, "", func(ctx context.Context, h *httpcall.Host) (int, error) {
		return e.call.DoJSON(ctx, h, http.MethodGet, path, nil, out, e.hdr)
	})
}

// Probe reads the index's mapping, similarity settings and document count
// on every host: a missing index or text field, or an empty index, stops
// the run before it starts.
func (e *Elastic) Probe(ctx context.Context) error {
	if err := e.checkHealth(ctx); err != nil {
		return err
	}
	for _, h := range e.call.Pool().Hosts() {
		if err := e.probeHost(ctx, h); err != nil {
			return fmt.Errorf("elasticsearch %s index %s: %w", h, e.cfg.Index, err)
		}
	}
	return nil
}

func (e *Elastic) probeHost(ctx context.Context, h *httpcall.Host) error {
	var settings map[string]struct {
		Settings struct {
			Index struct {
				Similarity map[string]map[string]any `json:"similarity"`
			} `json:"index"`
		} `json:"settings"`
	}
	if err := e.get(ctx, h, "/"+e.cfg.Index+"/_settings", &settings); err != nil {
		return fmt.Errorf("settings: %w", err)
	}
	var mappings map[string]struct {
		Mappings map[string]any `json:"mappings"`
	}
	if err := e.get(ctx, h, "/"+e.cfg.Index+"/_mapping", &mappings); err != nil {
		return fmt.Errorf("mapping: %w", err)
	}
	var count struct {
		Count *int64 `json:"count"`
	}
	if err := e.get(ctx, h, "/"+e.cfg.Index+"/_count", &count); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	if count.Count == nil {
		return fmt.Errorf(`count: the response has no "count"`)
	}
	if *count.Count == 0 {
		return fmt.Errorf("the index holds no documents")
	}
	names := make([]string, 0, len(mappings))
	for n := range mappings {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return fmt.Errorf("mapping: no index in the response")
	}
	var sim ElasticSimilarity
	for i, n := range names {
		field, ok := mappingField(mappings[n].Mappings, e.cfg.TextField)
		if !ok {
			return fmt.Errorf("index %s has no field %q (retrieval.elasticsearch.text_field)", n, e.cfg.TextField)
		}
		if t, _ := field["type"].(string); t != "text" {
			return fmt.Errorf("field %q of index %s has type %q: BM25 full-text search needs type text", e.cfg.TextField, n, t)
		}
		s, err := resolveSimilarity(field, settings[n].Settings.Index.Similarity)
		if err != nil {
			return fmt.Errorf("index %s: %w", n, err)
		}
		if err := CheckPushMarker(mappings[n].Mappings, e.cfg.IDField); err != nil {
			return fmt.Errorf("index %s: %w", n, err)
		}
		s.Index = n
		if i > 0 && (s.Type != sim.Type || s.K1 != sim.K1 || s.B != sim.B) {
			return fmt.Errorf("the indexes behind %s rank differently: %s %+v, %s %+v", e.cfg.Index, sim.Index, sim, n, s)
		}
		sim = s
	}
	sim.Index, sim.Docs = e.cfg.Index, *count.Count
	e.Similarity = sim
	return nil
}

// mappingField finds a (possibly dotted) field in a mapping's properties.
func mappingField(m map[string]any, field string) (map[string]any, bool) {
	cur := m
	for part := range strings.SplitSeq(field, ".") {
		props, _ := cur["properties"].(map[string]any)
		f, ok := props[part].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = f
	}
	return cur, true
}

// resolveSimilarity is the similarity Elasticsearch applies to a field: the
// one its mapping names, else the index's "default", else built-in BM25
// with k1 = 1.2, b = 0.75.
func resolveSimilarity(field map[string]any, defined map[string]map[string]any) (ElasticSimilarity, error) {
	name, _ := field["similarity"].(string)
	if name == "" {
		name = "default"
	}
	s := ElasticSimilarity{Name: name, Type: "BM25", K1: esDefaultK1, B: esDefaultB}
	def, ok := defined[name]
	switch {
	case ok:
	case name == "default" || name == "BM25":
		return s, nil
	case name == "boolean":
		s.Type, s.K1, s.B = "boolean", 0, 0
		return s, nil
	default:
		return s, fmt.Errorf("field similarity %q is not defined in the index settings", name)
	}
	if t, ok := def["type"].(string); ok {
		s.Type = t
	}
	for key, dst := range map[string]*float64{"k1": &s.K1, "b": &s.B} {
		v, ok := def[key]
		if !ok {
			continue
		}
		f, err := settingFloat(v)
		if err != nil {
			return s, fmt.Errorf("similarity %s: %s: %w", name, key, err)
		}
		*dst = f
	}
	return s, nil
}

// settingFloat reads a setting that Elasticsearch returns as a string ("0.9") or a number.
func settingFloat(v any) (float64, error) {
	switch x := v.(type) {
	case string:
		return strconv.ParseFloat(x, 64)
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("want a number, got %v", v)
}

// msearchResponse is the documented answer of _msearch: one item per query,
// each a search response or an error.
type msearchResponse struct {
	Responses []struct {
		Status   int                `json:"status"`
		Error    json.RawMessage    `json:"error"`
		Hits     *esHits            `json:"hits"`
		TimedOut bool               `json:"timed_out"`
		Shards   *msearchItemShards `json:"_shards"`
	} `json:"responses"`
}

type esHits struct {
	Hits []struct {
		ID     *string        `json:"_id"`
		Score  *float64       `json:"_score"`
		Source map[string]any `json:"_source"`
	} `json:"hits"`
}

// msearch is one _msearch call (the call itself retried by the client);
// searchBatch retries the items it answers with a transient failure.
func (e *Elastic) msearch(ctx context.Context, queries []string, k int) ([][]corpus.Ranked, []error, error) {
	var body bytes.Buffer
	// A shard that fails makes the item fail instead of answering without
	// that shard's documents (partial checks the answer all the same).
	hm := map[string]any{"index": e.cfg.Index, "allow_partial_search_results": false}
	if e.cfg.SearchType != "" {
		hm["search_type"] = e.cfg.SearchType
	}
	head, _ := json.Marshal(hm)
	fields := []string{e.cfg.TextField}
	if e.cfg.TitleField != "" {
		fields = append(fields, e.cfg.TitleField)
	}
	if e.cfg.IDField != "" {
		fields = append(fields, e.cfg.IDField)
	}
	for _, q := range queries {
		req := map[string]any{
			"query":            map[string]any{"match": map[string]any{e.cfg.TextField: map[string]any{"query": q}}},
			"size":             k,
			"_source":          fields,
			"track_total_hits": false,
		}
		if e.cfg.IDField != "" {
			req["sort"] = []any{map[string]any{"_score": "desc"}, map[string]any{e.cfg.IDField: "asc"}}
			req["track_scores"] = true
		}
		b, err := json.Marshal(req)
		if err != nil {
			return nil, nil, err
		}
		body.Write(head)
		body.WriteByte('\n')
		body.Write(b)
		body.WriteByte('\n')
	}
	hdr := e.hdr.Clone()
	hdr.Set("Content-Type", "application/x-ndjson")
	var resp msearchResponse
	err := e.call.Call(ctx, nil, "index "+e.cfg.Index, "", func(ctx context.Context, h *httpcall.Host) (int, error) {
		resp = msearchResponse{}
		st, err := e.call.PostJSON(ctx, h, "/_msearch", body.Bytes(), &resp, hdr)
		if err == nil && len(resp.Responses) != len(queries) {
			err = &httpcall.MalformedError{What: fmt.Sprintf("_msearch answered %d responses for %d queries", len(resp.Responses), len(queries))}
		}
		return st, err
	})
	if err != nil {
		return nil, nil, e.withClusterState(ctx, err)
	}
	lists := make([][]corpus.Ranked, len(queries))
	errs := make([]error, len(queries))
	for i, r := range resp.Responses {
		lists[i], errs[i] = e.convert(i, r.Status, r.Error, r.Hits)
		if errs[i] == nil {
			if errs[i] = e.partial(i, r.TimedOut, r.Shards); errs[i] != nil {
				lists[i] = nil
			}
		}
	}
	return lists, errs, nil
}

// convert turns one _msearch item into chunks.
func (e *Elastic) convert(i, status int, esErr json.RawMessage, hits *esHits) ([]corpus.Ranked, error) {
	if len(esErr) > 0 && string(esErr) != "null" {
		kind := "rejected"
		if status == http.StatusTooManyRequests || status >= 500 {
			kind = ResultUnavailable
		}
		return nil, resultErr(e.name, kind, "query %d: status %d: %s", i+1, status, ESReason(esErr))
	}
	if hits == nil {
		return nil, resultErr(e.name, ResultMalformed, `query %d: the response has neither "hits" nor "error"`, i+1)
	}
	out := make([]corpus.Ranked, len(hits.Hits))
	for j, h := range hits.Hits {
		if h.ID == nil || h.Score == nil {
			return nil, resultErr(e.name, ResultMalformed, "query %d hit %d: no _id or _score", i+1, j+1)
		}
		text, err := sourceString(h.Source, e.cfg.TextField)
		if err != nil {
			return nil, resultErr(e.name, ResultMalformed, "document %q: %v", *h.ID, err)
		}
		id := *h.ID
		if e.cfg.IDField != "" {
			// The id field, not _id, is the passage id: _id is limited to 512 bytes.
			if id, err = sourceString(h.Source, e.cfg.IDField); err != nil {
				return nil, resultErr(e.name, ResultMalformed, "document %q: %v", *h.ID, err)
			}
		}
		c := corpus.Chunk{ID: id, PassageID: id}
		if e.cfg.TitleField != "" {
			if c.Title, err = sourceString(h.Source, e.cfg.TitleField); err != nil {
				c.Title = "" // an untitled document is fine
			}
			c.Text = text
		} else {
			c.Title, c.Text = corpus.ParseContents(text)
		}
		out[j] = corpus.Ranked{Chunk: c, Score: *h.Score}
	}
	return out, nil
}

// ESReason is the "type: reason" of an Elasticsearch error object.
func ESReason(raw json.RawMessage) string {
	var e struct {
		Type   string `json:"type"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(raw, &e) == nil && (e.Type != "" || e.Reason != "") {
		return e.Type + ": " + e.Reason
	}
	return string(raw)
}

// sourceString reads a (possibly dotted) string field of a document's
// _source; a multi-valued field's values are joined by newlines.
func sourceString(src map[string]any, field string) (string, error) {
	v, ok := src[field]
	if !ok {
		cur := any(src)
		for part := range strings.SplitSeq(field, ".") {
			m, isMap := cur.(map[string]any)
			if !isMap {
				return "", fmt.Errorf("no field %q in _source", field)
			}
			if cur, ok = m[part]; !ok {
				return "", fmt.Errorf("no field %q in _source", field)
			}
		}
		v = cur
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case []any:
		parts := make([]string, len(x))
		for i, p := range x {
			s, ok := p.(string)
			if !ok {
				return "", fmt.Errorf("field %q: value %d is not a string", field, i+1)
			}
			parts[i] = s
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("field %q is not a string", field)
}
