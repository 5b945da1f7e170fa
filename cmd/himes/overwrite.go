package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// refuseOutputOverInput errors when the output file out is one of the inputs
// (the same file, by any path or link): an output is written whole and then
// renamed over its path, so the input would be gone.
func refuseOutputOverInput(outFlag, out string, inputs ...string) error {
	if in, ok := inputAt(out, inputs...); ok {
		return fmt.Errorf("%s %s is the input %s: it would be replaced; write elsewhere", outFlag, out, in)
	}
	return nil
}

// refuseOutputsOverInput is refuseOutputOverInput for a command that writes
// the files outs into the folder dir given as outFlag.
func refuseOutputsOverInput(outFlag, dir string, outs []string, inputs ...string) error {
	for _, out := range outs {
		if in, ok := inputAt(out, inputs...); ok {
			return fmt.Errorf("%s %s would write %s, which is the input %s: it would be replaced; write elsewhere", outFlag, dir, out, in)
		}
	}
	return nil
}

// inputAt returns the input that is the file at path, if any.
func inputAt(path string, inputs ...string) (string, bool) {
	oi, err := os.Stat(path)
	if err != nil {
		return "", false // nothing there yet: it cannot be an input
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		if ii, err := os.Stat(in); err == nil && os.SameFile(oi, ii) {
			return in, true
		}
	}
	return "", false
}

// refuseInputInOutputDir errors when an input lies inside the output
// directory dir, whose files the command writes (and may replace).
func refuseInputInOutputDir(outFlag, dir string, inputs ...string) error {
	d, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(d); err == nil {
		d = r
	}
	for _, in := range inputs {
		if in == "" {
			continue
		}
		p, err := filepath.Abs(in)
		if err != nil {
			continue
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if rel, err := filepath.Rel(d, p); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("%s %s holds the input %s, and its files are written there; write elsewhere", outFlag, dir, in)
		}
	}
	return nil
}
