package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// faultEnv names a crash-injection point for tests: "POINT:STEP" makes
// `himes train` kill itself with SIGKILL when the loop reaches POINT of STEP
// (points: before_sample, before_update, after_update). Only tests set it.
const faultEnv = "HIMES_FAULT"

// faultFromEnv returns the loop's fault hook, or nil when faultEnv is unset.
func faultFromEnv() (func(point string, step int), error) {
	v := os.Getenv(faultEnv)
	if v == "" {
		return nil, nil
	}
	point, stepStr, ok := strings.Cut(v, ":")
	step, err := strconv.Atoi(stepStr)
	if !ok || err != nil {
		return nil, fmt.Errorf("%s=%q: want POINT:STEP", faultEnv, v)
	}
	return func(p string, s int) {
		if p == point && s == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}, nil
}
