package main

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// randomScoreLine assembles lines from pieces that the fast decoder must get
// right or hand over: escapes (\" \\ \/ \n \t \u00e9 \ud83d\ude00), control
// characters, unknown and differently cased keys, duplicates, null, numbers,
// nested values, whitespace of every JSON kind, and truncations.
func randomScoreLine(r *rand.Rand) string {
	strs := []string{`""`, `"a"`, `"the tower"`, `"caf\u00e9"`, `"x\"y"`, `"back\\slash"`, `"a\/b"`, `"l1\nl2\tt"`,
		`"\b\f\r"`, `"\ud83d\ude00"`, "\"raw\x01ctl\"", `"é ü 北京"`, `"bad\q"`, `"unterminated`}
	vals := func(list bool) string {
		if !list {
			switch r.IntN(12) {
			case 0:
				return "null"
			case 1:
				return "42"
			case 2:
				return `["a"]`
			}
			return strs[r.IntN(len(strs))]
		}
		switch r.IntN(10) {
		case 0:
			return "null"
		case 1:
			return `"a"`
		case 2:
			return "[1]"
		case 3:
			return "[]"
		}
		var parts []string
		for range 1 + r.IntN(3) {
			parts = append(parts, strs[r.IntN(len(strs))])
		}
		ws := []string{"", " ", "\n\t", "\r "}[r.IntN(4)]
		return "[" + ws + strings.Join(parts, ws+","+ws) + ws + "]"
	}
	keys := []string{"prediction", "reference", "references", "context", "Prediction", "REFERENCE", "extra", "prediction"}
	var fields []string
	for range 1 + r.IntN(4) {
		k := keys[r.IntN(len(keys))]
		list := strings.HasPrefix(strings.ToLower(k), "references") || strings.ToLower(k) == "context"
		if k == "extra" {
			fields = append(fields, `"extra": {"n": [1, 2, {"x": null}]}`)
			continue
		}
		ws := []string{"", " ", "  ", "\t"}[r.IntN(4)]
		fields = append(fields, `"`+k+`"`+ws+":"+ws+vals(list))
	}
	line := []string{"", " ", "\t"}[r.IntN(3)] + "{" + strings.Join(fields, ", ") + "}" + []string{"", " ", "\r", " x"}[r.IntN(4)]
	if r.IntN(15) == 0 {
		line = line[:r.IntN(len(line)+1)]
	}
	return line
}

// TestDecodeScoreLineFast: whenever the fast decoder accepts a line,
// json.Unmarshal accepts it too and decodes the same record; it accepts the
// plain lines that `himes score` is fed, and hands everything else over.
func TestDecodeScoreLineFast(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 4))
	accepted := 0
	for range 50000 {
		line := randomScoreLine(r)
		got, ok := decodeScoreLineFast([]byte(line))
		var want scoreInput
		err := json.Unmarshal([]byte(line), &want)
		if !ok {
			continue
		}
		accepted++
		if err != nil {
			t.Fatalf("fast decoder accepted %q, which encoding/json refuses: %v", line, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("line %q: fast %+v, encoding/json %+v", line, got, want)
		}
	}
	if accepted < 2000 {
		t.Fatalf("the fast decoder accepted only %d of 50000 lines", accepted)
	}
	for _, line := range []string{
		`{"prediction": "the tower", "reference": "tower"}`,
		`{"prediction":"a","references":["b","c"],"context":["x y","z"]}`,
		" {\"prediction\": \"q\\\"uote\\n\", \"reference\": \"r\", \"context\": []}\r",
	} {
		got, ok := decodeScoreLineFast([]byte(line))
		var want scoreInput
		if err := json.Unmarshal([]byte(line), &want); err != nil || !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("line %q: fast %+v (ok %v), encoding/json %+v (%v)", line, got, ok, want, err)
		}
	}
	for _, line := range []string{
		`{"Prediction": "a", "reference": "b"}`,         // encoding/json matches keys case-insensitively
		`{"prediction": "a", "prediction": "b"}`,        // the last one wins there
		`{"prediction": "caf\u00e9", "reference": "b"}`, // \u escapes
		`{"prediction": null, "reference": "b"}`,
		`{"prediction": "a", "reference": "b", "n": 1}`,
		`{"prediction": "a"} {}`,
	} {
		if _, ok := decodeScoreLineFast([]byte(line)); ok {
			t.Errorf("fast decoder accepted %q, which it must hand to encoding/json", line)
		}
	}
}
