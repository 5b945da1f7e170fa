package datasets

import (
	"reflect"
	"testing"
)

// FuzzDecodeNormalized: no input panics, and whatever is accepted survives
// a write and a re-read unchanged.
func FuzzDecodeNormalized(f *testing.F) {
	f.Add([]byte(goodLine))
	f.Add([]byte(`{"conv_id": 7, "turn": "2-1", "question": null, "rewrite": "r", "history": [{"role": "user", "text": "a"}], "passages": [{"id": "p", "relevance": 3, "answer_snippets": [["x", "y"], []]}], "meta": {"n": 1.50, "deep": {"a": [1, "b", null]}}}`))
	f.Add([]byte(`{"conv_id": "c", "turn": 1, "question": "q <&> \u2028", "passages": [{"id": "p", "answer_snippets": []}]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"conv_id": "c", "turn": 1e3, "question": "q"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		turn, err := decodeNormalized(line, nil)
		if err != nil {
			return
		}
		b, err := turn.MarshalJSON()
		if err != nil {
			t.Fatalf("accepted %q but cannot write it: %v", line, err)
		}
		back, err := decodeNormalized(b, nil)
		if err != nil {
			t.Fatalf("wrote %s from %q but cannot read it back: %v", b, line, err)
		}
		if !reflect.DeepEqual(back, turn) {
			t.Fatalf("round trip changed %q:\n got %+v\nwant %+v", line, back, turn)
		}
	})
}
