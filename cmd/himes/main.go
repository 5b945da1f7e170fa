// Command himes trains and evaluates the query rewriter of a HiMeS-style
// agent memory. This package only parses flags and wires packages together.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "himes:", err)
		os.Exit(1)
	}
}
