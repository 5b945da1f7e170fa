package service

// The marker `himes index push` leaves in an index's _meta, which the
// Elasticsearch backend reads to refuse an unfinished push.

import (
	"encoding/json"
	"fmt"
)

// PushMarker is the _meta.himes object of an index that `himes index push`
// created: the push refuses to touch an index without it, and a run
// refuses to search one whose push did not finish.
type PushMarker struct {
	CreatedBy string  `json:"created_by"` // PushCreatedBy
	Himes     string  `json:"himes"`      // the binary's module version and VCS revision
	KBPath    string  `json:"kb_path"`
	KBSHA256  string  `json:"kb_sha256"`
	Analyzer  string  `json:"analyzer"` // the embedded analyzer's versioned ID the index reproduces
	K1        float64 `json:"k1"`
	B         float64 `json:"b"`
	Shards    int     `json:"shards"`
	Replicas  int     `json:"replicas"`
	Docs      int     `json:"docs"`
	Complete  bool    `json:"complete"` // set once every document is in and counted
}

// PushCreatedBy is the marker's created_by.
const PushCreatedBy = "himes index push"

// Names in the index `himes index push` creates.
const (
	// PushIDField is the keyword field holding each document's id, for
	// retrieval.elasticsearch.id_field.
	PushIDField = "id"
)

// CheckPushMarker refuses an index whose push started and never finished:
// it holds part of the KB, and rankings over it would be silently wrong;
// and a pushed index searched without idField "id", where ids longer than
// _id allows would come back as digests and ties in document order. An
// index without the marker (made by other tools) is not judged.
func CheckPushMarker(mapping map[string]any, idField string) error {
	m, ok, err := PushMarkerOf(mapping)
	switch {
	case err != nil || !ok:
		return err
	case !m.Complete:
		return fmt.Errorf("`%s` created this index from %s and did not finish (%d documents expected): push it again with --replace", PushCreatedBy, m.KBPath, m.Docs)
	case idField != PushIDField:
		return fmt.Errorf("`%s` created this index: set retrieval.elasticsearch.id_field to %q (its passage ids, and the order of equal scores)", PushCreatedBy, PushIDField)
	}
	return nil
}

// PushMarkerOf reads the marker of an index's mapping; ok is false when it has none.
func PushMarkerOf(mapping map[string]any) (PushMarker, bool, error) {
	meta, _ := mapping["_meta"].(map[string]any)
	raw, ok := meta["himes"]
	if !ok {
		return PushMarker{}, false, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return PushMarker{}, false, err
	}
	var m PushMarker
	if err := json.Unmarshal(b, &m); err != nil || m.CreatedBy != PushCreatedBy {
		return PushMarker{}, false, fmt.Errorf("_meta.himes is not a marker of %s: %s", PushCreatedBy, b)
	}
	return m, true, nil
}
