// Command candparity prints the embedded policy's candidate terms (and their
// statistics-free features) for every turn of conversation files, one JSON
// line per turn: {"source", "line", "candidates": [{"term", "features"}],
// "truncated"}. The reference trainer's tests (scripts/lora_trainer,
// test_candparity.py) run it on ../shared/data/conversations/*.jsonl and
// compare with candidates.py, so the Go and Python copies cannot drift.
//
//	go run ./scripts/candparity [-limit 96] [-memories ptkb] FILE...
//
// A turn's dialogue is its record as written: history = every message
// ({role, text} → {role, content}), question = the question; with
// -memories ptkb the record's meta.ptkb statements are its memories, in the
// numeric order of their ids.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"github.com/himes-rl/himes/trainer"
	"github.com/himes-rl/himes/trainer/embedded"
)

type record struct {
	History []struct {
		Role string `json:"role"`
		Text string `json:"text"`
	} `json:"history"`
	Question string `json:"question"`
	Meta     struct {
		PTKB map[string]string `json:"ptkb"`
	} `json:"meta"`
}

type output struct {
	Source     string               `json:"source"`
	Line       int                  `json:"line"`
	Candidates []embedded.Candidate `json:"candidates"`
	Truncated  bool                 `json:"truncated"`
}

func main() {
	limit := flag.Int("limit", 96, "candidates per turn (the ranking does not depend on it: a smaller cap is a prefix)")
	memories := flag.String("memories", "", `"ptkb": a record's meta.ptkb statements are its dialogue's memories`)
	flag.Parse()
	if *limit < 1 || (*memories != "" && *memories != "ptkb") || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: candparity [-limit N>=1] [-memories ptkb] FILE...")
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for _, path := range flag.Args() {
		if err := run(w, path, *memories, *limit); err != nil {
			fmt.Fprintf(os.Stderr, "candparity: %v\n", err)
			os.Exit(1)
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "candparity: %v\n", err)
		os.Exit(1)
	}
}

func run(w io.Writer, path, memories string, limit int) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(w)
	for line := 1; sc.Scan(); line++ {
		var rec record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
		d := trainer.Dialogue{Question: rec.Question, History: []trainer.Message{}}
		for _, m := range rec.History {
			d.History = append(d.History, trainer.Message{Role: m.Role, Content: m.Text})
		}
		if memories == "ptkb" {
			ids := make([]string, 0, len(rec.Meta.PTKB))
			for id := range rec.Meta.PTKB {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return numericLess(ids[i], ids[j]) })
			for _, id := range ids {
				d.Memories = append(d.Memories, trainer.DialogueMemory{ID: id, Text: rec.Meta.PTKB[id], Score: 1})
			}
		}
		cands, cut := embedded.Candidates(d, limit)
		if err := enc.Encode(output{Source: path, Line: line, Candidates: cands, Truncated: cut}); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// numericLess orders ids as numbers when both are, else as strings.
func numericLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA == nil && errB == nil {
		return x < y
	}
	return a < b
}
