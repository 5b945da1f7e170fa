package main

import (
	"fmt"
	"path/filepath"
	"strings"
)

// dataSetNames names each --data file of a per-file measurement by its base
// name without the extension, as the tables and figures do. Two files that
// would share a name are refused (their rows could not be told apart, and
// memory-quant's figures would overwrite each other), and so is one file
// given twice.
func dataSetNames(paths []string) ([]string, error) {
	names := make([]string, len(paths))
	first := map[string]string{}
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		if prev, dup := first[names[i]]; dup {
			if filepath.Clean(prev) == filepath.Clean(p) {
				return nil, fmt.Errorf("--data: %s given twice", p)
			}
			return nil, fmt.Errorf("--data: %s and %s would both be reported as %q: rename one", prev, p, names[i])
		}
		first[names[i]] = p
	}
	return names, nil
}
