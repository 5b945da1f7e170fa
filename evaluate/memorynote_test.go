package evaluate

import (
	"bytes"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/stats"
)

// A memory system counts the turns its memories re-ranked, apart from those
// they were merely activated on, and its note says when they never re-ranked:
// its rows then equal the memory-off rows for a reason that is not "memory
// does not help".
func TestMemoryNoteCountsRerankedTurns(t *testing.T) {
	res := []TurnResult{
		{Memories: []string{"a"}, Reranked: true},
		{Memories: []string{"b"}},
		{Memories: []string{"c"}, Reranked: true},
		{},
	}
	sr := summarizeSystem(System{Name: "raw+memory", Rewriter: Raw{}, Memory: true}, res, [][]int{{0, 1}, {2, 3}},
		stats.Config{Level: 0.95, Resamples: 10})
	if sr.MemoryTurns != 3 || sr.RerankedTurns != 2 {
		t.Fatalf("memory_turns %d, reranked_turns %d; want 3 and 2", sr.MemoryTurns, sr.RerankedTurns)
	}
	for _, c := range []struct {
		reranked int
		want     string
		never    bool
	}{
		{2, "raw+memory: long-term memory activated on 3 of 4 turns and re-ranked the candidates on 2.", false},
		{0, "raw+memory: long-term memory activated on 3 of 4 turns and re-ranked the candidates on 0.", true},
	} {
		rep := Report{Turns: 4, Conversations: 2, Stats: stats.Config{Level: 0.95, Resamples: 10}, Systems: []SystemReport{
			{Name: "raw+memory", Memory: true, Turns: 4, MemoryTurns: 3, RerankedTurns: c.reranked},
		}}
		var md bytes.Buffer
		if err := WriteMarkdown(&md, rep); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(md.String(), c.want) {
			t.Errorf("reranked %d: summary lacks %q:\n%s", c.reranked, c.want, md.String())
		}
		if got := strings.Contains(md.String(), "It never re-ranked"); got != c.never {
			t.Errorf("reranked %d: 'never re-ranked' shown %v, want %v", c.reranked, got, c.never)
		}
	}
}
