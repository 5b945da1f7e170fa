package main

import "github.com/spf13/cobra"

func newIndexCmd() *cobra.Command {
	return notImplemented("index", "Build and inspect the persisted BM25 index")
}
