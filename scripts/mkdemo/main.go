// Command mkdemo regenerates the quickstart demo data under datasets/demo/
// from the shared reference data, byte-identically for a given seed:
//
//	go run ./scripts/mkdemo                # from the repository root
//	go run ./scripts/mkdemo -data ../shared/data -out datasets/demo -seed 1
//
// It picks whole conversations of TREC CAsT 2020, CAsT 2021 and the MTRAG
// human evaluation subset, keeps their turns that have a question, a
// reference rewrite, an answer and grounding passages (turn > 1, so there is
// history to rewrite against), splits them by conversation into train and
// eval, and writes the knowledge base those turns reference plus seeded
// distractor passages from the same collections, so retrieval is not trivial.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/atomicfile"
)

// source is one conversation file the demo draws from.
type source struct {
	File    string // under <data>/conversations
	KB      string // its "source" value in kb/passages.jsonl
	Name    string
	License string
}

var sources = []source{
	{"cast2020.jsonl", "cast20", "TREC CAsT 2020", "MIT (treccastweb); passages: MS MARCO / TREC CAR terms"},
	{"cast2021.jsonl", "cast21", "TREC CAsT 2021", "MIT (treccastweb); passages: MS MARCO / KILT terms"},
	{"mtrag_human_eval_subset.jsonl", "mtrag", "IBM MTRAG (human evaluation subset)", "Apache-2.0"},
}

type options struct {
	Data        string
	Out         string
	Seed        int64
	Train, Eval int // target turn counts; whole conversations, so slightly over
	Distractors int
}

func main() {
	var o options
	flag.StringVar(&o.Data, "data", "../shared/data", "shared reference data directory")
	flag.StringVar(&o.Out, "out", "datasets/demo", "output directory")
	flag.Int64Var(&o.Seed, "seed", 1, "seed of the conversation and distractor choice")
	flag.IntVar(&o.Train, "train", 250, "target number of train turns")
	flag.IntVar(&o.Eval, "eval", 80, "target number of eval turns")
	flag.IntVar(&o.Distractors, "distractors", 1000, "number of distractor passages")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	sum, err := run(context.Background(), o)
	if err != nil {
		logger.Error("mkdemo failed", "err", err)
		os.Exit(1)
	}
	logger.Info("demo written", "out", o.Out, "train_turns", sum.TrainTurns, "eval_turns", sum.EvalTurns,
		"train_convs", sum.TrainConvs, "eval_convs", sum.EvalConvs, "passages", sum.Passages,
		"gold_passages", sum.Referenced, "bytes", sum.Bytes)
}

// summary is what run wrote; README.md is rendered from it.
type summary struct {
	Seed                    int64
	TrainTurns, EvalTurns   int
	TrainConvs, EvalConvs   int
	Passages, Referenced    int
	Distractors             int
	Bytes                   int64
	PerSource               []sourceCount
	Sources                 []source
	CandidateTurns          int
	TrainTarget, EvalTarget int
}

type sourceCount struct {
	Name                   string
	TrainConvs, TrainTurns int
	EvalConvs, EvalTurns   int
}

type conv struct {
	src   int
	id    string
	turns []datasets.Turn
	rank  uint64
}

func run(ctx context.Context, o options) (summary, error) {
	s := summary{Seed: o.Seed, Sources: sources, TrainTarget: o.Train, EvalTarget: o.Eval}
	// 1. Eligible turns, grouped by conversation, per source in a seeded order.
	perSource := make([][]*conv, len(sources))
	for i, src := range sources {
		path := filepath.Join(o.Data, "conversations", src.File)
		turns, _, err := datasets.LoadContext(ctx, path, datasets.LoadOptions{Format: datasets.FormatJSONL})
		if err != nil {
			return s, err
		}
		byID := map[string]*conv{}
		for _, t := range turns {
			if !eligible(t) {
				continue
			}
			s.CandidateTurns++
			c := byID[t.ConvID]
			if c == nil {
				c = &conv{src: i, id: t.ConvID, rank: seededHash(o.Seed, t.ConvID)}
				byID[t.ConvID] = c
				perSource[i] = append(perSource[i], c)
			}
			c.turns = append(c.turns, t)
		}
		sort.Slice(perSource[i], func(a, b int) bool {
			x, y := perSource[i][a], perSource[i][b]
			if x.rank != y.rank {
				return x.rank < y.rank
			}
			return x.id < y.id
		})
	}
	// 2. Interleave the sources so both splits mix them, then fill eval and
	// train in proportion to their targets, whole conversations at a time.
	var order []*conv
	for k := 0; ; k++ {
		added := false
		for i := range perSource {
			if k < len(perSource[i]) {
				order = append(order, perSource[i][k])
				added = true
			}
		}
		if !added {
			break
		}
	}
	inEval := map[*conv]bool{}
	var chosen []*conv
	train, eval := 0, 0
	for _, c := range order {
		if train >= o.Train && eval >= o.Eval {
			break
		}
		// Give the conversation to the split that is further behind its target.
		toEval := eval < o.Eval && (train >= o.Train || float64(eval)/float64(o.Eval) < float64(train)/float64(o.Train))
		if toEval {
			eval += len(c.turns)
		} else {
			train += len(c.turns)
		}
		inEval[c] = toEval
		chosen = append(chosen, c)
	}
	if train < o.Train || eval < o.Eval {
		return s, fmt.Errorf("only %d eligible turns; want %d train + %d eval", s.CandidateTurns, o.Train, o.Eval)
	}
	// 3. Output in source order, then file order within a source.
	sort.SliceStable(chosen, func(a, b int) bool { return chosen[a].src < chosen[b].src })
	var trainTurns, evalTurns []datasets.Turn
	referenced := map[string]bool{}
	s.PerSource = make([]sourceCount, len(sources))
	for i := range sources {
		s.PerSource[i].Name = sources[i].Name
	}
	for _, c := range chosen {
		pc := &s.PerSource[c.src]
		for _, t := range c.turns {
			t = slim(t)
			for _, p := range t.Passages {
				referenced[p.ID] = true
			}
			if inEval[c] {
				evalTurns = append(evalTurns, t)
			} else {
				trainTurns = append(trainTurns, t)
			}
		}
		if inEval[c] {
			pc.EvalConvs++
			pc.EvalTurns += len(c.turns)
			s.EvalConvs++
		} else {
			pc.TrainConvs++
			pc.TrainTurns += len(c.turns)
			s.TrainConvs++
		}
	}
	sortTurns := func(ts []datasets.Turn, convOrder map[string]int) {
		sort.SliceStable(ts, func(a, b int) bool { return convOrder[ts[a].ConvID] < convOrder[ts[b].ConvID] })
	}
	convOrder := map[string]int{}
	for i, c := range chosen {
		convOrder[c.id] = i
	}
	sortTurns(trainTurns, convOrder)
	sortTurns(evalTurns, convOrder)
	s.TrainTurns, s.EvalTurns = len(trainTurns), len(evalTurns)

	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return s, fmt.Errorf("create %s: %w", o.Out, err)
	}
	if err := datasets.WriteJSONLContext(ctx, filepath.Join(o.Out, "train.jsonl"), trainTurns); err != nil {
		return s, err
	}
	if err := datasets.WriteJSONLContext(ctx, filepath.Join(o.Out, "eval.jsonl"), evalTurns); err != nil {
		return s, err
	}
	// 4. The knowledge base: referenced passages plus seeded distractors.
	n, err := writePassages(ctx, o, referenced, &s)
	if err != nil {
		return s, err
	}
	s.Passages = n
	s.Referenced = len(referenced)
	for _, f := range []string{"train.jsonl", "eval.jsonl", "passages.jsonl"} {
		st, err := os.Stat(filepath.Join(o.Out, f))
		if err != nil {
			return s, err
		}
		s.Bytes += st.Size()
	}
	if err := writeReadme(filepath.Join(o.Out, "README.md"), s); err != nil {
		return s, err
	}
	return s, nil
}

// eligible: a turn the quickstart can both train the rewriter on (question,
// reference rewrite, history) and score end to end (answer, gold passages).
func eligible(t datasets.Turn) bool {
	return t.Turn > 1 && t.Question != "" && t.HasRewrite() && strings.TrimSpace(t.Answer) != "" && len(t.Passages) > 0
}

// slim drops the passage text from a turn (passages.jsonl has it) and the
// user key (the run config's user_field decides it), to keep the demo small.
func slim(t datasets.Turn) datasets.Turn {
	ps := make([]datasets.PassageRef, len(t.Passages))
	for i, p := range t.Passages {
		p.Text = ""
		ps[i] = p
	}
	t.Passages = ps
	t.User = ""
	return t
}

// writePassages copies the selected lines of kb/passages.jsonl verbatim, in
// file order: every referenced passage and the Distractors unreferenced
// passages of the same collections with the smallest seeded hash.
func writePassages(ctx context.Context, o options, referenced map[string]bool, s *summary) (int, error) {
	path := filepath.Join(o.Data, "kb", "passages.jsonl")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read knowledge base: %w", err)
	}
	kbSources := map[string]bool{}
	for _, src := range sources {
		kbSources[src.KB] = true
	}
	type line struct {
		id   string
		text []byte
		rank uint64
	}
	var lines []line
	var pool []int
	found := map[string]bool{}
	br := bufio.NewReader(bytes.NewReader(raw))
	for no := 1; ; no++ {
		b, rerr := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			var p struct {
				ID     string `json:"id"`
				Source string `json:"source"`
			}
			if err := json.Unmarshal(b, &p); err != nil || p.ID == "" {
				return 0, fmt.Errorf("%s:%d: want an object with an id: %v", path, no, err)
			}
			b = bytes.TrimRight(b, "\r\n")
			lines = append(lines, line{id: p.ID, text: b, rank: seededHash(o.Seed, p.ID)})
			if referenced[p.ID] {
				found[p.ID] = true
			} else if kbSources[p.Source] {
				pool = append(pool, len(lines)-1)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return 0, fmt.Errorf("read %s: %w", path, rerr)
		}
	}
	for id := range referenced {
		if !found[id] {
			return 0, fmt.Errorf("%s: passage %q referenced by the demo turns is missing", path, id)
		}
	}
	sort.Slice(pool, func(a, b int) bool {
		x, y := lines[pool[a]], lines[pool[b]]
		if x.rank != y.rank {
			return x.rank < y.rank
		}
		return x.id < y.id
	})
	keep := map[int]bool{}
	for _, i := range pool[:min(o.Distractors, len(pool))] {
		keep[i] = true
	}
	s.Distractors = len(keep)
	var out bytes.Buffer
	n := 0
	for i, l := range lines {
		if referenced[l.id] || keep[i] {
			out.Write(l.text)
			out.WriteByte('\n')
			n++
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return n, writeFile(filepath.Join(o.Out, "passages.jsonl"), out.Bytes())
}

func writeFile(path string, b []byte) error {
	return atomicfile.WriteFile(path, b, 0o644)
}

// seededHash is FNV-1a over the seed and s: stable across Go releases.
func seededHash(seed int64, s string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(s))
	return h.Sum64()
}

func writeReadme(path string, s summary) error {
	tmpl, err := template.New("readme").Parse(readmeTemplate)
	if err != nil {
		return fmt.Errorf("readme template: %w", err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, s); err != nil {
		return fmt.Errorf("render readme: %w", err)
	}
	return writeFile(path, b.Bytes())
}
