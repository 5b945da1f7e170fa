// Package indexbench measures the on-disk BM25 index on a synthetic Zipf
// knowledge base (`himes index bench`): build throughput, peak memory,
// index size, open time and query latency, each phase in a child process
// of its own so that each peak RSS is that phase's alone.
package indexbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/launch"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// Params are the synthetic corpus and query set of `himes index bench`.
type Params struct {
	Docs    int     `json:"docs"`
	Vocab   int     `json:"vocab"`
	Len     int     `json:"len"`
	S       float64 `json:"s"`
	Queries int     `json:"queries"`
	Seed    uint64  `json:"seed"`
	Block   int     `json:"block_docs"`
	Scoring string  `json:"scoring,omitempty"`
	Format  string  `json:"kb_format,omitempty"`
}

// querySkip is how many of the most frequent words queries leave out.
const querySkip = 20

// Validate refuses parameters the generator cannot honour: Go's Zipf needs
// an exponent above 1 (it returns nil otherwise), and queries draw words
// past the querySkip most frequent: a vocabulary no larger than that draws
// for ever, and one barely larger almost never reaches a usable word, so
// querySkip more words are asked for.
func (p Params) Validate() error {
	switch {
	case p.Docs < 1:
		return fmt.Errorf("index bench: --docs must be ≥ 1, got %d", p.Docs)
	case p.Vocab < 2*querySkip:
		return fmt.Errorf("index bench: --vocab must be ≥ %d (queries skip the %d most frequent words), got %d", 2*querySkip, querySkip, p.Vocab)
	case p.Len < 1:
		return fmt.Errorf("index bench: --len must be ≥ 1, got %d", p.Len)
	case !(p.S > 1) || math.IsInf(p.S, 0):
		return fmt.Errorf("index bench: --s (the Zipf exponent) must be a finite number > 1, got %v", p.S)
	case p.Queries < 1:
		return fmt.Errorf("index bench: --queries must be ≥ 1, got %d", p.Queries)
	case p.Block < 0:
		return fmt.Errorf("index bench: --block-docs must be ≥ 0 (0: the default), got %d", p.Block)
	}
	return nil
}

// KBFile is the bench KB's name for its format.
func (p Params) KBFile(dir string) string {
	if p.Format == "parquet" {
		return filepath.Join(dir, "kb.parquet")
	}
	return filepath.Join(dir, "kb.jsonl")
}

// Phase is what one child process measured.
type Phase struct {
	Phase      string  `json:"phase"`
	Seconds    float64 `json:"seconds"`
	PeakRSS    int64   `json:"peak_rss"` // VmHWM of the child, bytes
	RSS        int64   `json:"rss"`      // VmRSS at the end, bytes
	RSSAnon    int64   `json:"rss_anon"` // of which anonymous (heap)
	RSSFile    int64   `json:"rss_file"` // of which file-backed (the mapped index)
	OpenMs     float64 `json:"open_ms,omitempty"`
	OpenRSS    int64   `json:"open_rss,omitempty"` // VmRSS right after opening
	P50us      float64 `json:"p50_us,omitempty"`
	P99us      float64 `json:"p99_us,omitempty"`
	IndexBytes int64   `json:"index_bytes,omitempty"`
	Postings   int     `json:"postings,omitempty"`
	Terms      int     `json:"terms,omitempty"`
}

// Run writes the Zipf KB and measures each phase in a child process of its
// own, exe with "index bench --phase NAME" (so each peak RSS is its own),
// then prints the table to w.
func Run(ctx context.Context, w io.Writer, exe, dir string, p Params, keep, memory bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("index bench: %w", err)
	}
	if !keep {
		defer os.Remove(p.KBFile(dir))
		defer os.RemoveAll(filepath.Join(dir, "disk"))
		defer os.RemoveAll(filepath.Join(dir, "mem"))
	}
	load := loadAvg()
	phases := []string{"gen", "build", "query"}
	if memory {
		phases = append(phases, "membuild")
	}
	res := map[string]Phase{}
	for _, ph := range phases {
		args := []string{"index", "bench", "--phase", ph, "--dir", dir, "--docs", strconv.Itoa(p.Docs),
			"--vocab", strconv.Itoa(p.Vocab), "--len", strconv.Itoa(p.Len), "--s", strconv.FormatFloat(p.S, 'g', -1, 64),
			"--queries", strconv.Itoa(p.Queries), "--seed", strconv.FormatUint(p.Seed, 10), "--block-docs", strconv.Itoa(p.Block), "--scoring", p.Scoring, "--kb-format", p.Format}
		c := exec.CommandContext(ctx, exe, args...)
		c.Stderr = os.Stderr
		launch.DieWithParent(c)
		out, err := c.Output()
		if err != nil {
			return fmt.Errorf("index bench: phase %s: %w", ph, err)
		}
		var r Phase
		if err := json.Unmarshal(lastLine(out), &r); err != nil {
			return fmt.Errorf("index bench: phase %s printed %q: %w", ph, out, err)
		}
		res[ph] = r
	}
	b, q := res["build"], res["query"]
	mib := func(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }
	fmt.Fprintf(w, "scoring %s, %s KB; load average before: %s; after: %s\n", p.Scoring, p.Format, load, loadAvg())
	fmt.Fprintf(w, "| docs | postings | terms | build s | build docs/s | build peak RSS | index size | peak/size | open ms | RSS after open | RSS after queries (heap + mapped) | p50 µs | p99 µs |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| %d | %d | %d | %.1f | %.0f | %s | %s | %.2f | %.1f | %s | %s (%s + %s) | %.0f | %.0f |\n",
		p.Docs, b.Postings, b.Terms, b.Seconds, float64(p.Docs)/b.Seconds, mib(b.PeakRSS), mib(b.IndexBytes),
		float64(b.PeakRSS)/float64(b.IndexBytes), q.OpenMs, mib(q.OpenRSS), mib(q.RSS), mib(q.RSSAnon), mib(q.RSSFile), q.P50us, q.P99us)
	if m, ok := res["membuild"]; ok {
		fmt.Fprintf(w, "in-memory index.bin from the same KB: %.1f s, peak RSS %s, index.bin %s (peak/size %.2f)\n",
			m.Seconds, mib(m.PeakRSS), mib(m.IndexBytes), float64(m.PeakRSS)/float64(m.IndexBytes))
	}
	return nil
}

// lastLine is the last non-empty line of a child's output.
func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// RunPhase runs one phase (gen, build, membuild, query) in this process and
// prints what it measured as one JSON line.
func RunPhase(ctx context.Context, w io.Writer, phase, dir string, p Params) error {
	kb := p.KBFile(dir)
	cfg := retrieval.DefaultConfig()
	cfg.ChunkWords, cfg.ChunkStride, cfg.Scoring = 0, 0, p.Scoring
	r := Phase{Phase: phase}
	start := time.Now()
	switch phase {
	case "gen":
		f, err := os.Create(kb)
		if err != nil {
			return err
		}
		write := corpus.WriteZipfKB
		if p.Format == "parquet" {
			write = corpus.WriteZipfKBParquet
		}
		if err := write(f, p.Seed, p.Docs, p.Vocab, p.Len, p.S); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	case "build":
		meta, err := retrieval.BuildDiskIndex(ctx, cfg, kb, filepath.Join(dir, "disk"), retrieval.DiskBuildOptions{BlockDocs: p.Block})
		if err != nil {
			return err
		}
		st, err := os.Stat(filepath.Join(dir, "disk", retrieval.DiskIndexFile))
		if err != nil {
			return err
		}
		r.IndexBytes, r.Postings, r.Terms = st.Size(), meta.Postings, meta.Terms
	case "membuild":
		meta, err := retrieval.BuildIndexDir(ctx, cfg, kb, filepath.Join(dir, "mem"))
		if err != nil {
			return err
		}
		st, err := os.Stat(filepath.Join(dir, "mem", retrieval.IndexFile))
		if err != nil {
			return err
		}
		r.IndexBytes, r.Postings, r.Terms = st.Size(), meta.Postings, meta.Terms
	case "query":
		qs := corpus.ZipfQueries(p.Seed+1, p.Queries, p.Vocab, querySkip, p.S)
		t0 := time.Now()
		ix, _, err := retrieval.OpenDiskIndex(filepath.Join(dir, "disk"))
		if err != nil {
			return err
		}
		defer ix.Close()
		r.OpenMs = float64(time.Since(t0).Microseconds()) / 1000
		_, r.OpenRSS = procStatus()
		lat := make([]float64, len(qs))
		for i, q := range qs {
			t := time.Now()
			hits := ix.Search(q, 10)
			for _, h := range hits {
				_ = ix.ID(h.Doc)
				if _, _, err := ix.Doc(h.Doc); err != nil {
					return err
				}
			}
			lat[i] = float64(time.Since(t).Nanoseconds()) / 1000
		}
		slices.Sort(lat)
		if len(lat) > 0 {
			r.P50us, r.P99us = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
		}
	default:
		return fmt.Errorf("index bench: unknown phase %q", phase)
	}
	r.Seconds = time.Since(start).Seconds()
	r.PeakRSS, r.RSS = procStatus()
	r.RSSAnon, r.RSSFile = procStatusField("RssAnon"), procStatusField("RssFile")
	return json.NewEncoder(w).Encode(r)
}

// procStatus reads VmHWM and VmRSS (bytes) from /proc/self/status; zeros
// where there is no /proc.
func procStatus() (hwm, rss int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmHWM":
			hwm = n << 10
		case "VmRSS":
			rss = n << 10
		}
	}
	return hwm, rss
}

// procStatusField reads one "Name: N kB" field of /proc/self/status in
// bytes; 0 where there is none.
func procStatusField(name string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			fs := strings.Fields(v)
			if len(fs) == 2 {
				n, _ := strconv.ParseInt(fs[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// loadAvg is the machine's 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fs := strings.Fields(string(b))
	return strings.Join(fs[:min(3, len(fs))], " ")
}
