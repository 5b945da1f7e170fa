package retrieval

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// testTurn is the part of the conversations schema the tests need (decoded
// locally so these tests do not depend on the datasets package).
type testTurn struct {
	ConvID   string  `json:"conv_id"`
	Turn     any     `json:"turn"`
	Question string  `json:"question"`
	Rewrite  *string `json:"rewrite"`
	History  []struct {
		Role string `json:"role"`
		Text string `json:"text"`
	} `json:"history"`
	Passages []struct {
		ID        string `json:"id"`
		Relevance *int   `json:"relevance"`
	} `json:"passages"`
}

func readTurns(t testing.TB, path string) []testTurn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []testTurn
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var tt testTurn
		if err := json.Unmarshal(sc.Bytes(), &tt); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, tt)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// sortedPassages returns the passages in ascending byte order of id.
func sortedPassages(ps []corpus.Passage) []corpus.Passage {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b corpus.Passage) int { return strings.Compare(a.ID, b.ID) })
	return out
}
