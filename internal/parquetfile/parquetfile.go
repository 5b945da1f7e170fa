// Package parquetfile writes one Arrow record batch as a Parquet file the
// way every table himes writes needs it: atomically (a reader or a crash
// sees the old file or the whole new one), zstd-compressed, buffered so a
// file is a few write calls instead of one per page.
package parquetfile

import (
	"bufio"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
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
