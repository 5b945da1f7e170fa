package retrieval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/himes-rl/himes/internal/progress"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/himes-rl/himes/retrieval/corpus"
)

// openDisk opens an on-disk index as the pipeline's first stage without
// loading the knowledge base: chunks are read from the index's document
// store when retrieved. The KB file is still checked: a different size is
// stale; a different modification time makes it hash the file (streamed)
// and compare with the fingerprint the index was built from.
func (p *Pipeline) openDisk(ctx context.Context, kbPath string, start time.Time) error {
	cfg := p.cfg
	ix, meta, err := OpenDiskIndex(cfg.Index)
	if err != nil {
		return err
	}
	if err := checkDiskKB(ctx, meta, kbPath); err != nil {
		ix.Close()
		return fmt.Errorf("index %s: %w", cfg.Index, err)
	}
	if err := checkIndexConfig(meta, cfg); err != nil {
		ix.Close()
		return fmt.Errorf("index %s: %w", cfg.Index, err)
	}
	p.kb = &corpus.KB{Path: kbPath, Fingerprint: meta.KBFingerprint}
	p.bm25, p.analyzer = ix, ix.Analyzer()
	p.chunkVecs = make([]atomic.Pointer[[]float32], ix.Len())
	slog.Info("retrieval: on-disk BM25 index open", "kb", kbPath, "index", cfg.Index, "chunks", ix.Len(),
		"terms", ix.NumTerms(), "elapsed_s", progress.Seconds(time.Since(start)))
	return nil
}

// checkDiskKB refuses an on-disk index whose knowledge base has changed.
func checkDiskKB(ctx context.Context, meta IndexMeta, kbPath string) error {
	st, err := os.Stat(kbPath)
	if err != nil {
		return fmt.Errorf("knowledge base: %w", err)
	}
	if st.Size() != meta.KBSize {
		return fmt.Errorf("stale: built from a knowledge base of %d bytes, %s has %d: rebuild with `himes index build --disk`",
			meta.KBSize, kbPath, st.Size())
	}
	if st.ModTime().UnixNano() == meta.KBModTime {
		return nil
	}
	f, err := os.Open(kbPath)
	if err != nil {
		return fmt.Errorf("knowledge base: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, &ctxReader{ctx: ctx, r: f}); err != nil {
		return fmt.Errorf("knowledge base %s: %w", kbPath, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != meta.KBFingerprint {
		return fmt.Errorf("stale: built from a knowledge base with SHA-256 %.12s…, %s has %.12s…: rebuild with `himes index build --disk`",
			meta.KBFingerprint, kbPath, got)
	}
	return nil
}

// ctxReader stops a long read when the context is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
