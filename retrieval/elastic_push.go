package retrieval

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/buildinfo"
	"github.com/himes-rl/himes/internal/httpcall"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"
)

// Names in the index `himes index push` creates.
const (
	pushSimilarity = "himes_bm25"
	pushAnalyzer   = "himes"
)

// PushOptions shape the index `himes index push` creates and how it fills it.
type PushOptions struct {
	// Shards and Replicas of the new index. One shard is the default: BM25
	// statistics (document frequencies, average length) are per shard, so
	// with several shards a query's scores depend on which shard holds a
	// document unless it is searched with dfs_query_then_fetch.
	Shards, Replicas int
	// BatchDocs is the number of documents per _bulk request.
	BatchDocs int
	// Replace deletes and re-pushes an index an earlier push created from
	// other settings or another KB, or left unfinished. An index without
	// the push's marker is never touched.
	Replace bool
	// Progress, when set, is told the documents indexed so far.
	Progress func(done, total int)
}

// DefaultPushOptions is one shard, one replica, 500 documents per request.
func DefaultPushOptions() PushOptions { return PushOptions{Shards: 1, Replicas: 1, BatchDocs: 500} }

// PushResult is what a push did.
type PushResult struct {
	Index    string
	Docs     int
	UpToDate bool // the index already held this KB with these settings: nothing was sent
	Retried  int  // bulk items sent again after a rejection
}

// pushAnalysis is the index analysis that reproduces an embedded analyzer
// with OpenSearch's (Lucene's) own components.
//
//   - plain (lowercase runs of [a-z0-9]): a pattern tokenizer splitting on
//     anything outside [A-Za-z0-9], then lowercase — the same terms exactly.
//   - lucene-english (Anserini's DefaultEnglishAnalyzer): the standard
//     tokenizer, the English possessive filter, lowercase, the stop filter
//     with "_english_" (Lucene's 33 English stopwords) and porter_stem
//     (Lucene's PorterStemFilter) — the very Lucene classes himes reproduces.
//   - english (Snowball stopwords and stemming, github.com/kljensen/snowball)
//     has no exact OpenSearch counterpart (Lucene's Snowball English stemmer
//     and stopword list are other versions), so it is refused rather than
//     approximated.
func pushAnalysis(analyzer string) (map[string]any, error) {
	switch analyzer {
	case "", analysis.Plain:
		return map[string]any{
			"tokenizer": map[string]any{"himes_ascii_runs": map[string]any{"type": "pattern", "pattern": "[^A-Za-z0-9]+"}},
			"analyzer": map[string]any{pushAnalyzer: map[string]any{
				"type": "custom", "tokenizer": "himes_ascii_runs", "filter": []string{"lowercase"}}},
		}, nil
	case analysis.LuceneEnglish:
		return map[string]any{
			"filter": map[string]any{
				"himes_possessive": map[string]any{"type": "stemmer", "language": "possessive_english"},
				"himes_stop":       map[string]any{"type": "stop", "stopwords": "_english_"},
			},
			"analyzer": map[string]any{pushAnalyzer: map[string]any{
				"type": "custom", "tokenizer": "standard",
				"filter": []string{"himes_possessive", "lowercase", "himes_stop", "porter_stem"}}},
		}, nil
	}
	return nil, fmt.Errorf("retrieval.analyzer %q has no exact OpenSearch/Elasticsearch equivalent (the Snowball stemmer and stopwords of github.com/kljensen/snowball differ from Lucene's): push with plain or lucene-english", analyzer)
}

// pushIndexBody is the create-index request: the BM25 similarity with the
// config's k1 and b, the analyzer, a strict mapping and the unfinished marker.
func pushIndexBody(cfg Config, opt PushOptions, marker service.PushMarker) (map[string]any, error) {
	analysis, err := pushAnalysis(cfg.Analyzer)
	if err != nil {
		return nil, err
	}
	es := cfg.Elasticsearch
	props := map[string]any{
		service.PushIDField: map[string]any{"type": "keyword"},
		es.TextField:        map[string]any{"type": "text", "analyzer": pushAnalyzer, "similarity": pushSimilarity},
	}
	return map[string]any{
		"settings": map[string]any{"index": map[string]any{
			"number_of_shards":   opt.Shards,
			"number_of_replicas": opt.Replicas,
			// No refresh while the bulk requests run; one at the end.
			"refresh_interval": "-1",
			"similarity":       map[string]any{pushSimilarity: map[string]any{"type": "BM25", "k1": cfg.K1, "b": cfg.B}},
			"analysis":         analysis,
		}},
		"mappings": map[string]any{
			"dynamic":    "strict",
			"_meta":      map[string]any{"himes": marker},
			"properties": props,
		},
	}, nil
}

// PushKB creates cfg.Elasticsearch.Index and bulk-indexes the knowledge base
// at kbPath into it: one document per passage with _id and the id field set
// to the passage id and the text field holding `"Title"\ntext` (the form the
// elasticsearch backend splits back into title and text). An index that
// exists is only replaced when the push's marker says a push made it and
// opt.Replace is set; one that already holds this KB with these settings is
// left as it is. Rejected bulk items (429, 5xx) are sent again; the push
// ends by checking that every shard copy counts every document.
func PushKB(ctx context.Context, cfg Config, kbPath string, opt PushOptions) (PushResult, error) {
	es := cfg.Elasticsearch
	res := PushResult{Index: es.Index}
	if err := es.Validate(); err != nil {
		return res, fmt.Errorf("retrieval.elasticsearch: %w", err)
	}
	if cfg.ChunkWords != 0 {
		return res, fmt.Errorf("retrieval.chunk_words is %d: the elasticsearch backend takes each document for one passage, so push an unchunked KB (chunk_words 0)", cfg.ChunkWords)
	}
	if es.TextField == service.PushIDField || strings.Contains(es.TextField, ".") {
		return res, fmt.Errorf("retrieval.elasticsearch.text_field %q: the push writes a top-level text field other than %q", es.TextField, service.PushIDField)
	}
	if opt.Shards < 1 || opt.Replicas < 0 || opt.BatchDocs < 1 {
		return res, fmt.Errorf("push: need shards ≥ 1, replicas ≥ 0 and batch ≥ 1, got %d, %d, %d", opt.Shards, opt.Replicas, opt.BatchDocs)
	}
	an, err := analysis.New(cfg.Analyzer)
	if err != nil {
		return res, err
	}
	if _, err := pushAnalysis(cfg.Analyzer); err != nil {
		return res, err
	}
	kb, err := corpus.Load(ctx, kbPath)
	if err != nil {
		return res, err
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		return res, err
	}
	abs, _ := filepath.Abs(kbPath)
	bi := buildinfo.Current()
	marker := service.PushMarker{CreatedBy: service.PushCreatedBy, Himes: strings.TrimSpace(bi.Version + " " + bi.Revision), KBPath: abs, KBSHA256: kb.Fingerprint,
		Analyzer: an.ID(), K1: cfg.K1, B: cfg.B, Shards: opt.Shards, Replicas: opt.Replicas, Docs: len(chunks)}
	res.Docs = len(chunks)

	e, err := service.NewElastic(es, 0)
	if err != nil {
		return res, err
	}
	defer e.Close()
	p := &pusher{e: e, index: es.Index, opt: opt, backoff: httpcall.NewBackoff(es.Call.BackoffBase, es.Call.BackoffMax, 1)}
	if hl, err := e.ClusterHealth(ctx); err != nil {
		return res, err
	} else if hl.Status == "red" {
		return res, fmt.Errorf("refusing to push into a red cluster: %s", hl)
	}
	upToDate, err := p.prepare(ctx, marker)
	if err != nil || upToDate {
		res.UpToDate = upToDate
		return res, err
	}
	body, err := pushIndexBody(cfg, opt, marker)
	if err != nil {
		return res, err
	}
	if err := p.do(ctx, http.MethodPut, "/"+p.index, body, nil); err != nil {
		return res, fmt.Errorf("create index %s: %w", p.index, err)
	}
	slog.Info("index created", "index", p.index, "shards", opt.Shards, "replicas", opt.Replicas, "analyzer", an.ID(), "k1", cfg.K1, "b", cfg.B)
	for lo := 0; lo < len(chunks); lo += opt.BatchDocs {
		hi := min(lo+opt.BatchDocs, len(chunks))
		if err := p.bulk(ctx, chunks[lo:hi], es.TextField); err != nil {
			return res, fmt.Errorf("push documents %d..%d of %d into %s: %w", lo+1, hi, len(chunks), p.index, err)
		}
		if opt.Progress != nil {
			opt.Progress(hi, len(chunks))
		}
	}
	res.Retried = p.retried
	if err := p.finish(ctx, marker); err != nil {
		return res, err
	}
	return res, nil
}

// maxDocID is the longest _id Elasticsearch and OpenSearch accept, in bytes.
const maxDocID = 512

// pushDocID is a passage's _id: the id itself, or for an id longer than
// _id allows (URLs as ids), "sha256:" and its hex digest. The id field
// always holds the id itself, and the backend reads ids from it.
func pushDocID(id string) string {
	if len(id) <= maxDocID && !strings.HasPrefix(id, "sha256:") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pusher runs the push's requests against one cluster.
type pusher struct {
	e       *service.Elastic
	index   string
	opt     PushOptions
	backoff *httpcall.Backoff
	retried int
}

// do runs one JSON request (retried by the client on connection errors,
// timeouts, 429 and 5xx).
func (p *pusher) do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	return p.e.Caller().Call(ctx, nil, "index "+p.index, "", func(ctx context.Context, h *httpcall.Host) (int, error) {
		return p.e.Caller().DoJSON(ctx, h, method, path, raw, out, p.e.Header())
	})
}

// prepare decides what to do with an existing index of that name: nothing
// when it is this push, finished; delete it when a push made it and Replace
// is set; refuse otherwise.
func (p *pusher) prepare(ctx context.Context, want service.PushMarker) (upToDate bool, err error) {
	var got map[string]struct {
		Mappings map[string]any `json:"mappings"`
	}
	err = p.do(ctx, http.MethodGet, "/"+p.index+"/_mapping", nil, &got)
	var nf *httpcall.ModelNotFoundError
	if errors.As(err, &nf) {
		return false, nil // no such index: create it
	}
	if err != nil {
		return false, fmt.Errorf("index %s: %w", p.index, err)
	}
	if len(got) != 1 {
		return false, fmt.Errorf("%s names %d indexes (an alias or a pattern): push into a plain index name", p.index, len(got))
	}
	for name, m := range got {
		if name != p.index {
			return false, fmt.Errorf("%s is an alias of index %s: refusing to push through an alias; name the index itself", p.index, name)
		}
		have, ok, err := service.PushMarkerOf(m.Mappings)
		if err != nil {
			return false, fmt.Errorf("index %s: %w", p.index, err)
		}
		if !ok {
			return false, fmt.Errorf("index %s exists and was not created by %s (its mapping has no _meta.himes): refusing to overwrite it; set retrieval.elasticsearch.index to a new name", p.index, service.PushCreatedBy)
		}
		same := have.Complete && have.KBSHA256 == want.KBSHA256 && have.Analyzer == want.Analyzer && have.K1 == want.K1 &&
			have.B == want.B && have.Shards == want.Shards && have.Replicas == want.Replicas && have.Docs == want.Docs
		if same {
			var count struct {
				Count int `json:"count"`
			}
			if err := p.do(ctx, http.MethodGet, "/"+p.index+"/_count", nil, &count); err != nil {
				return false, fmt.Errorf("count %s: %w", p.index, err)
			}
			if count.Count == want.Docs {
				slog.Info("index up to date: it holds this KB with these settings", "index", p.index, "docs", count.Count)
				return true, nil
			}
		}
		if !p.opt.Replace {
			return false, fmt.Errorf("index %s was pushed from %s (sha256 %.12s, analyzer %s, k1 %v, b %v, %d shards, %d replicas, %d docs, complete %v), which is not this push: pass --replace to delete and push it again",
				p.index, have.KBPath, have.KBSHA256, have.Analyzer, have.K1, have.B, have.Shards, have.Replicas, have.Docs, have.Complete)
		}
		slog.Info("deleting the index an earlier push made", "index", p.index, "kb", have.KBPath, "complete", have.Complete)
		if err := p.do(ctx, http.MethodDelete, "/"+p.index, nil, nil); err != nil {
			return false, fmt.Errorf("delete %s: %w", p.index, err)
		}
	}
	return false, nil
}

// bulkResponse is the documented answer of _bulk.
type bulkResponse struct {
	Errors bool `json:"errors"`
	Items  []map[string]struct {
		ID     string          `json:"_id"`
		Status int             `json:"status"`
		Error  json.RawMessage `json:"error"`
	} `json:"items"`
}

// bulk indexes docs with op_type create: a document sent twice (a request
// retried after the cluster took it) is a 409 conflict, never a second
// version, so no deleted copy skews the BM25 statistics. Items rejected with
// 429 or 5xx are sent again, up to the configured retries.
func (p *pusher) bulk(ctx context.Context, docs []Chunk, textField string) error {
	todo := docs
	for round := 0; ; round++ {
		var body bytes.Buffer
		for _, c := range todo {
			head, _ := json.Marshal(map[string]any{"create": map[string]string{"_index": p.index, "_id": pushDocID(c.PassageID)}})
			doc, err := json.Marshal(map[string]string{service.PushIDField: c.PassageID, textField: corpus.FormatContents(c)})
			if err != nil {
				return err
			}
			body.Write(head)
			body.WriteByte('\n')
			body.Write(doc)
			body.WriteByte('\n')
		}
		hdr := p.e.Header()
		hdr.Set("Content-Type", "application/x-ndjson")
		var resp bulkResponse
		err := p.e.Caller().Call(ctx, nil, "index "+p.index, "", func(ctx context.Context, h *httpcall.Host) (int, error) {
			resp = bulkResponse{}
			st, err := p.e.Caller().PostJSON(ctx, h, "/_bulk", body.Bytes(), &resp, hdr)
			if err == nil && len(resp.Items) != len(todo) {
				err = &httpcall.MalformedError{What: fmt.Sprintf("_bulk answered %d items for %d documents", len(resp.Items), len(todo))}
			}
			return st, err
		})
		if err != nil {
			return err
		}
		var again []Chunk
		var last string
		for i, item := range resp.Items {
			r, ok := item["create"]
			switch {
			case !ok:
				return fmt.Errorf("_bulk item %d has no create result", i+1)
			case r.Status == http.StatusCreated || r.Status == http.StatusOK:
			case r.Status == http.StatusConflict:
				// Already there: an earlier attempt of this request got it in.
			case r.Status == http.StatusTooManyRequests || r.Status >= 500:
				again = append(again, todo[i])
				last = fmt.Sprintf("document %q: status %d: %s", todo[i].PassageID, r.Status, service.ESReason(r.Error))
			default:
				return fmt.Errorf("document %q rejected: status %d: %s", todo[i].PassageID, r.Status, service.ESReason(r.Error))
			}
		}
		if len(again) == 0 {
			return nil
		}
		if round >= p.e.Retries() {
			return fmt.Errorf("%d documents still rejected after %d retries, e.g. %s", len(again), round, last)
		}
		p.retried += len(again)
		slog.Warn("bulk items rejected, sending them again", "index", p.index, "items", len(again), "retry", round+1, "example", last)
		select {
		case <-time.After(p.backoff.Delay(round + 1)):
		case <-ctx.Done():
			return ctx.Err()
		}
		todo = again
	}
}

// finish refreshes the index, waits for every shard copy, checks that each
// copy counts every document, and only then marks the push complete.
func (p *pusher) finish(ctx context.Context, marker service.PushMarker) error {
	if err := p.do(ctx, http.MethodPut, "/"+p.index+"/_settings", map[string]any{"index": map[string]any{"refresh_interval": nil}}, nil); err != nil {
		return fmt.Errorf("restore the refresh interval of %s: %w", p.index, err)
	}
	if err := p.do(ctx, http.MethodPost, "/"+p.index+"/_refresh", nil, nil); err != nil {
		return fmt.Errorf("refresh %s: %w", p.index, err)
	}
	if err := p.waitGreen(ctx, 2*time.Minute); err != nil {
		return err
	}
	var count struct {
		Count int `json:"count"`
	}
	if err := p.do(ctx, http.MethodGet, "/"+p.index+"/_count", nil, &count); err != nil {
		return fmt.Errorf("count %s: %w", p.index, err)
	}
	if count.Count != marker.Docs {
		return fmt.Errorf("index %s counts %d documents after the push, want %d", p.index, count.Count, marker.Docs)
	}
	if err := p.checkCopies(ctx, marker.Docs); err != nil {
		return err
	}
	marker.Complete = true
	if err := p.do(ctx, http.MethodPut, "/"+p.index+"/_mapping", map[string]any{"_meta": map[string]any{"himes": marker}}, nil); err != nil {
		return fmt.Errorf("mark %s complete: %w", p.index, err)
	}
	slog.Info("index pushed and verified", "index", p.index, "docs", marker.Docs, "shards", marker.Shards, "replicas", marker.Replicas)
	return nil
}

// checkCopies reads every shard copy's document count: the primaries add up
// to the KB, each replica equals its primary, and no copy holds a deleted
// document (which BM25's document frequencies would still count).
func (p *pusher) checkCopies(ctx context.Context, want int) error {
	var stats struct {
		Indices map[string]struct {
			Shards map[string][]struct {
				Routing struct {
					Primary bool   `json:"primary"`
					Node    string `json:"node"`
				} `json:"routing"`
				Docs struct {
					Count   int `json:"count"`
					Deleted int `json:"deleted"`
				} `json:"docs"`
			} `json:"shards"`
		} `json:"indices"`
	}
	if err := p.do(ctx, http.MethodGet, "/"+p.index+"/_stats/docs?level=shards", nil, &stats); err != nil {
		return fmt.Errorf("shard statistics of %s: %w", p.index, err)
	}
	ix, ok := stats.Indices[p.index]
	if !ok {
		return fmt.Errorf("shard statistics of %s: the index is missing from the answer", p.index)
	}
	total := 0
	shards := make([]string, 0, len(ix.Shards))
	for s := range ix.Shards {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	for _, s := range shards {
		copies := ix.Shards[s]
		if len(copies) != 1+p.opt.Replicas {
			return fmt.Errorf("index %s shard %s has %d copies, want %d", p.index, s, len(copies), 1+p.opt.Replicas)
		}
		primary := -1
		for _, c := range copies {
			if c.Routing.Primary {
				primary = c.Docs.Count
			}
		}
		for _, c := range copies {
			if c.Docs.Count != primary || c.Docs.Deleted != 0 {
				return fmt.Errorf("index %s shard %s: the copy on node %s holds %d documents (%d deleted), its primary %d",
					p.index, s, c.Routing.Node, c.Docs.Count, c.Docs.Deleted, primary)
			}
		}
		total += primary
	}
	if total != want {
		return fmt.Errorf("index %s: its primary shards hold %d documents, want %d", p.index, total, want)
	}
	return nil
}

// waitGreen polls the index's health until every shard copy is allocated.
func (p *pusher) waitGreen(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var hl service.ClusterHealth
		if err := p.do(ctx, http.MethodGet, "/_cluster/health/"+p.index, nil, &hl); err != nil {
			return fmt.Errorf("health of %s: %w", p.index, err)
		}
		if hl.Status == "green" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("index %s is not green after %s (%s): a shard copy could not be allocated (fewer data nodes than copies?)", p.index, limit, hl)
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
