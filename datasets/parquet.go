package datasets

import (
	"context"
	"fmt"
)

func readParquetRecords(ctx context.Context, path string) ([]record, error) {
	return nil, fmt.Errorf("load %s: parquet reader lands in the next commit", path)
}
