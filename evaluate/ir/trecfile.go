package ir

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/retrieval"
)

// The TREC file formats, read as trec_eval 10 reads them (get_trec_results.c,
// get_qrels.c, form_res_rels.c): whitespace-separated fields, blank lines
// skipped, lines starting with '#' (after blanks) are comments, and a
// docno given twice for one query is an error.

// TRECRun is a parsed run file.
type TRECRun struct {
	// Queries maps qid → the run's entries, in file order (the rank column
	// is ignored, as trec_eval ignores it: it sorts by score).
	Queries map[string][]retrieval.Scored
	// RunID is the tag of the last line, as trec_eval reports it.
	RunID string
}

// ReadTRECRun reads a TREC run: "qid Q0 docno rank score tag" per line; any
// field after tag is ignored, as trec_eval ignores it. Errors name the file
// and line: too few fields, a score that is not a number, a docno given
// twice for one query.
func ReadTRECRun(r io.Reader, name string) (TRECRun, error) {
	run := TRECRun{Queries: map[string][]retrieval.Scored{}}
	first := map[[2]string]int{} // (qid, docno) → line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 6 {
			return TRECRun{}, fmt.Errorf("%s:%d: want 6 fields (qid Q0 docno rank score tag), got %d", name, line, len(f))
		}
		score, err := strconv.ParseFloat(f[4], 64)
		if err != nil || math.IsNaN(score) {
			return TRECRun{}, fmt.Errorf("%s:%d: field score: %q is not a number", name, line, f[4])
		}
		k := [2]string{f[0], f[2]}
		if l, dup := first[k]; dup {
			return TRECRun{}, fmt.Errorf("%s:%d: query %s: docno %s already on line %d (trec_eval refuses duplicate docs)", name, line, f[0], f[2], l)
		}
		first[k] = line
		run.Queries[f[0]] = append(run.Queries[f[0]], retrieval.Scored{ID: f[2], Score: score})
		run.RunID = f[5]
	}
	if err := sc.Err(); err != nil {
		return TRECRun{}, fmt.Errorf("%s: %w", name, err)
	}
	return run, nil
}

// ParseTRECRun is ReadTRECRun's qid → entries.
func ParseTRECRun(r io.Reader, name string) (map[string][]retrieval.Scored, error) {
	run, err := ReadTRECRun(r, name)
	return run.Queries, err
}

// ParseQrels reads TREC qrels ("qid iter docno relevance" per line, exactly
// four fields as trec_eval wants) into qid → docno → relevance. A relevance
// ≥ 1 is relevant; 0 is judged non-relevant; a negative one is in the pool
// but unjudged. A docno judged twice for one query is an error.
func ParseQrels(r io.Reader, name string) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	first := map[[2]string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 fields (qid iter docno relevance), got %d", name, line, len(f))
		}
		rel, err := strconv.Atoi(f[3])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: field relevance: %q is not an integer", name, line, f[3])
		}
		k := [2]string{f[0], f[2]}
		if l, dup := first[k]; dup {
			return nil, fmt.Errorf("%s:%d: query %s: docno %s already judged on line %d (trec_eval refuses duplicate docs)", name, line, f[0], f[2], l)
		}
		first[k] = line
		if out[f[0]] == nil {
			out[f[0]] = map[string]int{}
		}
		out[f[0]][f[2]] = rel
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
