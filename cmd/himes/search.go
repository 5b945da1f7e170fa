package main

import "github.com/spf13/cobra"

func newSearchCmd() *cobra.Command {
	return notImplemented("search", "Retrieve for a query and show the ranking (debugging)")
}
