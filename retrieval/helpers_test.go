package retrieval

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// sharedData locates ../shared/data from the repository root, walking up
// from the package directory; tests that need it skip when it is absent.
func sharedData(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "..", "shared", "data")
			if _, err := os.Stat(p); err != nil {
				t.Skipf("shared data not found at %s", p)
			}
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("repository root not found")
		}
		dir = parent
	}
}

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
