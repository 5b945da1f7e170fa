// Package parquetfile writes one Arrow record batch as a Parquet file the
// way every table himes writes needs it: atomically (a reader or a crash
// sees the old file or the whole new one), zstd-compressed, buffered so a
// file is a few write calls instead of one per page; and reads a whole file
// back as one table with its metadata.
package parquetfile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// Write writes rec (of schema) to path atomically with zstd compression.
func Write(path string, schema *arrow.Schema, rec arrow.RecordBatch) error {
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	return atomicfile.Write(path, 0o644, func(f io.Writer) error {
		bw := bufio.NewWriterSize(f, 64<<10)
		// The bare io.Writer keeps pqarrow from closing the file, which
		// atomicfile syncs and renames.
		w, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{bw}, props, pqarrow.DefaultWriterProps())
		if err != nil {
			return fmt.Errorf("parquet writer: %w", err)
		}
		if err := w.Write(rec); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// Table is a whole Parquet file read into memory, with its key-value
// metadata. Release it when done.
type Table struct {
	arrow.Table
	meta metadata.KeyValueMetadata
}

// Meta returns the file's key-value metadata entry k ("" when absent).
func (t Table) Meta(k string) string {
	if v := t.meta.FindValue(k); v != nil {
		return *v
	}
	return ""
}

// ReadTable reads the Parquet file at path (raw: its bytes, already read)
// into one table, batchSize rows per chunk. Errors name the file.
func ReadTable(ctx context.Context, path string, raw []byte, batchSize int64) (Table, error) {
	pf, err := file.NewParquetReader(bytes.NewReader(raw))
	if err != nil {
		return Table{}, fmt.Errorf("%s: open parquet: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchSize}, memory.DefaultAllocator)
	if err != nil {
		return Table{}, fmt.Errorf("%s: parquet reader: %w", path, err)
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		return Table{}, fmt.Errorf("%s: read parquet: %w", path, err)
	}
	return Table{Table: tbl, meta: pf.MetaData().KeyValueMetadata()}, nil
}
