package evaluate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/stats"
)

// The summary names the retrieval that produced it: method, depths and both
// embedders in the Markdown and the JSON; a report that does not say prints
// no such line.
func TestSummaryNamesTheRetrieval(t *testing.T) {
	rep := Report{Turns: 1, Conversations: 1, Stats: stats.Config{Level: 0.95, Resamples: 10},
		Systems: []SystemReport{{Name: "raw", Turns: 1, Metrics: map[string]stats.Estimate{MRecall10: {Mean: 0.5}}}}}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "Retrieval:") {
		t.Errorf("a report without retrieval info prints a retrieval line:\n%s", md.String())
	}
	rep.Retrieval = RetrievalInfo{Method: "dense", TopK: 3, Candidates: 100, Embedder: "ollama/all-minilm@abc", MemoryEmbedder: "lsa-tfidf-v1/64/def"}
	md.Reset()
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	want := "Retrieval: dense, top 3 of 100 candidates, embedded by ollama/all-minilm@abc; long-term memory embedded by lsa-tfidf-v1/64/def.\n"
	if !strings.Contains(md.String(), want) {
		t.Errorf("summary.md lacks %q:\n%s", want, md.String())
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Retrieval map[string]any `json:"retrieval"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Retrieval["method"] != "dense" || back.Retrieval["top_k"] != 3.0 || back.Retrieval["candidates"] != 100.0 ||
		back.Retrieval["embedder"] != "ollama/all-minilm@abc" || back.Retrieval["memory_embedder"] != "lsa-tfidf-v1/64/def" {
		t.Errorf("summary.json retrieval: %v", back.Retrieval)
	}
}
