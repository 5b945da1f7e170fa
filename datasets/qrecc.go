package datasets

import (
	"context"
	"fmt"
)

func readJSONArray(ctx context.Context, path, format string) ([]record, error) {
	return nil, fmt.Errorf("load %s: %s reader lands in the next commit", path, format)
}
