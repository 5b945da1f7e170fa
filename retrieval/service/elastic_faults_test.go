package service_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/service"
)

// A red index is refused before the run starts; a yellow one (a replica
// missing, every document still searchable) is searched.
func TestElasticHealthAtStart(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	es := newFakeES(t, local)
	es.health = "red"
	_, err := retrieval.Open(t.Context(), elasticConfig(es.URL), "")
	if err == nil || !strings.Contains(err.Error(), "refusing to search: cluster fake is red") {
		t.Fatalf("red index: got %v, want a refusal naming the cluster state", err)
	}
	es.health = "yellow"
	if _, err := retrieval.Open(t.Context(), elasticConfig(es.URL), ""); err != nil {
		t.Fatalf("yellow index: %v", err)
	}
}

// An _msearch item with a failed shard answered with the other shard's
// hits: it is never taken as the ranking. Sent again, a whole answer is
// used; failing through every retry, the query fails alone, its error
// naming the shard failure and the cluster state.
func TestElasticPartialItemsRetriedNeverScored(t *testing.T) {
	local := openDemo(t, retrieval.DefaultConfig())
	es := newFakeES(t, local)
	p, err := retrieval.Open(t.Context(), elasticConfig(es.URL), "")
	if err != nil {
		t.Fatal(err)
	}
	reqs := []retrieval.Request{{Query: "who won the world cup"}, {Query: "president of the united states"}}
	clean, errs := p.RetrieveBatch(t.Context(), reqs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}

	es.partialQuery, es.partialFor = reqs[0].Query, 2 // fails twice, fastService retries twice
	got, errs := p.RetrieveBatch(t.Context(), reqs)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("partial twice, then whole: %v", errs)
	}
	if !reflect.DeepEqual(got, clean) {
		t.Fatalf("the retried ranking differs from the clean one")
	}
	if es.partialFor != 0 {
		t.Fatalf("the partial answers were not all consumed: %d left", es.partialFor)
	}

	es.partialFor = -1
	got, errs = p.RetrieveBatch(t.Context(), reqs)
	var re *service.ResultError
	if !errors.As(errs[0], &re) || re.Kind != service.ResultUnavailable || got[0].Chunks != nil {
		t.Fatalf("always partial: got %v with %d chunks, want an unavailable error and no chunks", errs[0], len(got[0].Chunks))
	}
	for _, want := range []string{"1 of 2 shards failed", "node_not_connected_exception", "after 2 retries", "cluster fake is green"} {
		if !strings.Contains(errs[0].Error(), want) {
			t.Errorf("error %q lacks %q", errs[0], want)
		}
	}
	if errs[1] != nil || !reflect.DeepEqual(got[1], clean[1]) {
		t.Errorf("the batch's other query: %v", errs[1])
	}
}

func TestPushMarkerRefusesUnfinishedIndex(t *testing.T) {
	mk := func(meta map[string]any) map[string]any { return map[string]any{"_meta": meta} }
	if err := service.CheckPushMarker(mk(nil), ""); err != nil {
		t.Errorf("an index without the marker is another tool's: %v", err)
	}
	done := map[string]any{"himes": map[string]any{"created_by": service.PushCreatedBy, "complete": true, "docs": 3}}
	if err := service.CheckPushMarker(mk(done), service.PushIDField); err != nil {
		t.Errorf("a finished push: %v", err)
	}
	if err := service.CheckPushMarker(mk(done), ""); err == nil || !strings.Contains(err.Error(), `set retrieval.elasticsearch.id_field to "id"`) {
		t.Errorf("a pushed index searched without its id field: got %v", err)
	}
	open := map[string]any{"himes": map[string]any{"created_by": service.PushCreatedBy, "complete": false, "docs": 3, "kb_path": "/kb.jsonl"}}
	if err := service.CheckPushMarker(mk(open), service.PushIDField); err == nil || !strings.Contains(err.Error(), "did not finish (3 documents expected)") {
		t.Errorf("an unfinished push: got %v", err)
	}
	forged := map[string]any{"himes": map[string]any{"created_by": "someone"}}
	if err := service.CheckPushMarker(mk(forged), service.PushIDField); err == nil {
		t.Errorf("a _meta.himes of another origin must not pass as a marker")
	}
}
